package integration

import (
	"bytes"
	"context"
	"crypto/rand"
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
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/token"
	"github.com/sandgate/sandgate/integration/harness"
)

// testClient is the tests' HTTP client: http.DefaultClient's transport
// with a bound on every request, its response body read included, so a
// peer that hangs fails the request instead of holding the test until the
// package's -timeout. The longest requests here are streams a test holds
// open on purpose (an event stream, requests held at a concurrency bound,
// a download read slowly); the tests end each in seconds, most under a
// context bounded by waitLimit (60 s), so 2 minutes fits them with room.
var testClient = &http.Client{Timeout: 2 * time.Minute}

// The pinned E2B JS SDKs (npm aliases in integration/js/package.json).
var sdkPackages = []string{"e2b-2.25.0", "e2b-2.51.0"}

// Sandboxes and credentials of the shared test setup. Every sandbox is
// known to the fixed entry, so a request the gateway wrongly let through
// would reach the execd stand-in and show up in its records.
const (
	// sbxOK: an enabled credential on cluster-a, a token for itself.
	sbxOK = "sbxok"
	// sbxBadToken: the token is signed with a key the gateway does not
	// have (same kid, other secret).
	sbxBadToken = "sbxbadtoken"
	// sbxDisabled: the token names the disabled credential.
	sbxDisabled = "sbxdisabled"
	// sbxWrong: the token is for sbxOK, the SDK addresses sbxWrong.
	sbxWrong = "sbxwrong"
	// sbxNoCluster: the credential's clusterId is not configured.
	sbxNoCluster = "sbxnocluster"

	credOK        = "cred-a"
	credDisabled  = "cred-off"
	credNoCluster = "cred-elsewhere"

	// envdPort is the logical service the SDKs name in E2b-Sandbox-Port.
	envdPort = "49983"
)

// waitLimit bounds every wait on a peer (SDK script, stand-in record).
const waitLimit = 60 * time.Second

// credentialsYAML renders the credentials file. ok says what happens to
// credOK: "enabled", "disabled" or "absent".
func credentialsYAML(ok string) string {
	var b strings.Builder
	b.WriteString("credentials:\n")
	entry := func(id string, enabled bool, cluster string) {
		fmt.Fprintf(&b, "  - id: %s\n    enabled: %t\n    resourceSpecId: spec-small\n    resourceGroupId: group-1\n"+
			"    projectNamespace: team-a\n    clusterId: %s\n", id, enabled, cluster)
	}
	switch ok {
	case "enabled":
		entry(credOK, true, "cluster-a")
	case "disabled":
		entry(credOK, false, "cluster-a")
	}
	entry(credDisabled, false, "cluster-a")
	entry(credNoCluster, true, "cluster-z")
	return b.String()
}

// repoRoot is the repository root (the tests run in integration/).
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// requirePeers fails the test (never skips) when the built gateway or the
// pinned SDKs are missing.
func requirePeers(t testing.TB) string {
	t.Helper()
	root := repoRoot(t)
	if fi, err := os.Stat(harness.CaddyBinary(root)); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("the gateway binary bin/caddy is missing (%v): run make build / npm ci", err)
	}
	for _, pkg := range sdkPackages {
		if _, err := os.Stat(filepath.Join(root, "integration/js/node_modules", pkg, "package.json")); err != nil {
			t.Fatalf("the E2B SDK %s is not installed (%v): run make build / npm ci (cd integration/js && npm ci)", pkg, err)
		}
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node is not on PATH: %v", err)
	}
	return root
}

// logBuffer collects the gateway's log and lets a test wait for a line.
type logBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func newLogBuffer() *logBuffer { return &logBuffer{changed: make(chan struct{})} }

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.buf.Write(p)
	close(l.changed)
	l.changed = make(chan struct{})
	return n, err
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// waitFor blocks until the log contains s after byte offset from, or ctx
// ends.
func (l *logBuffer) waitFor(ctx context.Context, from int, s string) error {
	for {
		l.mu.Lock()
		ok := l.buf.Len() >= from && strings.Contains(l.buf.String()[from:], s)
		ch := l.changed
		l.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("the gateway log did not show %q: %w", s, ctx.Err())
		}
	}
}

func (l *logBuffer) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Len()
}

// testEnv is a running harness environment with the shared setup.
type testEnv struct {
	*harness.Env
	t    testing.TB
	root string
	log  *logBuffer
}

// envOption adjusts the harness configuration before a start attempt.
type envOption func(*harness.Config)

// startEnv starts the built gateway and the stand-ins with the shared
// credentials and grants; Cleanup stops them. The options are applied
// anew for every start attempt: a start that fails with
// harness.ErrBindRace (a port the options or the Caddyfile name was taken
// before the gateway listened) is tried again, up to 5 attempts, and an
// option that picks a port picks a new one.
func startEnv(t testing.TB, opts ...envOption) *testEnv {
	t.Helper()
	root := requirePeers(t)
	otherKey := otherSigningKey(t)
	var (
		log *logBuffer
		env *harness.Env
		err error
	)
	for attempt := 1; ; attempt++ {
		log = newLogBuffer()
		cfg := harness.Config{
			RepoRoot:    root,
			Credentials: credentialsYAML("enabled"),
			Grants: map[string]harness.Grant{
				sbxOK:        {CredentialID: credOK},
				sbxBadToken:  {CredentialID: credOK, Key: &otherKey},
				sbxDisabled:  {CredentialID: credDisabled},
				sbxWrong:     {CredentialID: credOK, SandboxID: sbxOK},
				sbxNoCluster: {CredentialID: credNoCluster},
			},
			Sandboxes: []string{sbxOK, sbxBadToken, sbxDisabled, sbxWrong, sbxNoCluster},
			Stderr:    log,
		}
		for _, o := range opts {
			o(&cfg)
		}
		if env, err = harness.Start(cfg); err == nil || !errors.Is(err, harness.ErrBindRace) || attempt == 5 {
			break
		}
		t.Logf("start attempt %d: %v; again", attempt, err)
	}
	if err != nil {
		t.Fatalf("starting the environment: %v\ngateway log:\n%s", err, log.String())
	}
	t.Cleanup(env.Close)
	return &testEnv{Env: env, t: t, root: root, log: log}
}

// otherSigningKey is an HS256 key with the harness's kid ("primary") but a
// secret the gateway does not know.
func otherSigningKey(t testing.TB) token.SigningKey {
	t.Helper()
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	p := filepath.Join(t.TempDir(), "other.key")
	if err := os.WriteFile(p, []byte(hex.EncodeToString(secret)), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := token.LoadSigningKey("primary", "HS256", p)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// host returns the host path that stands for sandbox path p.
func (e *testEnv) host(p string) string { return filepath.Join(e.Root, filepath.FromSlash(p)) }

// mkdir creates sandbox directory p.
func (e *testEnv) mkdir(p string) {
	e.t.Helper()
	if err := os.MkdirAll(e.host(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
}

// mint returns a token for sandbox id (grant g) without logging it.
func (e *testEnv) mint(id string, g harness.Grant) string {
	e.t.Helper()
	tok, err := e.Mint(id, g)
	if err != nil {
		e.t.Fatalf("minting a token: %v", err)
	}
	return tok
}

// writeCredentials replaces the credentials file atomically (write a
// temporary file in the same directory, then rename it over the file) and
// returns the moment of the rename.
func (e *testEnv) writeCredentials(content string) time.Time {
	e.t.Helper()
	tmp, err := os.CreateTemp(filepath.Dir(e.CredFile), ".credentials-*.tmp")
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := tmp.WriteString(content); err != nil {
		e.t.Fatal(err)
	}
	if err := tmp.Close(); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Rename(tmp.Name(), e.CredFile); err != nil {
		e.t.Fatal(err)
	}
	return time.Now()
}

// sdkError is how sdk.mjs describes a thrown error.
type sdkError struct {
	Name     string `json:"name"`
	Message  string `json:"message"`
	ExitCode *int   `json:"exitCode"`
}

// attempt is sdk.mjs's attempt(): a value or an error.
type attempt struct {
	OK     bool            `json:"ok"`
	Value  json.RawMessage `json:"value"`
	Error  *sdkError       `json:"error"`
	Stdout *string         `json:"stdout"`
	Stderr *string         `json:"stderr"`
}

// commandResult is the SDK's CommandResult.
type commandResult struct {
	ExitCode int     `json:"exitCode"`
	Stdout   string  `json:"stdout"`
	Stderr   string  `json:"stderr"`
	Error    *string `json:"error"`
}

// runSDK runs `node sdk.mjs <scenario>` with SDK package pkg against the
// gateway for sandbox id, checks the envelope it prints and decodes its
// result into out.
func (e *testEnv) runSDK(t *testing.T, pkg, scenario, id string, out any, extraEnv ...string) {
	t.Helper()
	res, err := e.sdk(pkg, scenario, id, extraEnv...)
	if err != nil {
		t.Fatalf("%v\ngateway log:\n%s", err, e.log.String())
	}
	if err := json.Unmarshal(res, out); err != nil {
		t.Fatalf("sdk.mjs %s result %s: %v", scenario, res, err)
	}
	t.Logf("%s %s: %s", pkg, scenario, res)
}

// sdk runs sdk.mjs and returns its result; it is safe to call from any
// goroutine.
func (e *testEnv) sdk(pkg, scenario, id string, extraEnv ...string) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "sdk.mjs", scenario)
	cmd.Dir = filepath.Join(e.root, "integration/js")
	cmd.Env = append(append(os.Environ(), "E2B_PACKAGE="+pkg, "E2B_API_URL="+e.Control,
		"E2B_SANDBOX_URL="+e.Gateway, "SANDBOX_ID="+id), extraEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("node sdk.mjs %s (%s, %s): %v\nstdout:\n%s\nstderr:\n%s",
			scenario, pkg, id, err, stdout.String(), stderr.String())
	}
	var env struct {
		Package  string          `json:"package"`
		Scenario string          `json:"scenario"`
		Result   json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &env); err != nil {
		return nil, fmt.Errorf("sdk.mjs %s printed %q: %v", scenario, stdout.String(), err)
	}
	if env.Package != pkg || env.Scenario != scenario {
		return nil, fmt.Errorf("sdk.mjs ran package %q scenario %q, want %q %q", env.Package, env.Scenario, pkg, scenario)
	}
	return env.Result, nil
}

// envdRequest is a request to the gateway as an SDK would send it.
type envdRequest struct {
	method, path string
	// contentType; "" sends none.
	contentType string
	body        []byte
	// sandboxID, port, token: "" omits the header.
	sandboxID, port, token string
}

// envdResponse is what came back.
type envdResponse struct {
	status int
	header http.Header
	body   []byte
}

// errorCode is the Sandgate-Error-Code header.
func (r envdResponse) errorCode() string { return r.header.Get("Sandgate-Error-Code") }

// do sends r to the gateway with a plain Go client.
func (e *testEnv) do(ctx context.Context, r envdRequest) (envdResponse, error) {
	return e.doWith(ctx, testClient, r)
}

// doWith sends r with client c.
func (e *testEnv) doWith(ctx context.Context, c *http.Client, r envdRequest) (envdResponse, error) {
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, e.Gateway+r.path, body)
	if err != nil {
		return envdResponse{}, err
	}
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
		if strings.HasPrefix(r.contentType, "application/") && strings.Contains(r.contentType, "json") {
			req.Header.Set("Connect-Protocol-Version", "1")
		}
	}
	if r.sandboxID != "" {
		req.Header.Set("E2b-Sandbox-Id", r.sandboxID)
	}
	if r.port != "" {
		req.Header.Set("E2b-Sandbox-Port", r.port)
	}
	if r.token != "" {
		req.Header.Set("X-Access-Token", r.token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return envdResponse{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return envdResponse{}, err
	}
	return envdResponse{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// listDir is POST /filesystem.Filesystem/ListDir {"path":"/home/user"} for
// sbxOK with tok.
func (e *testEnv) listDir(ctx context.Context, tok string) (envdResponse, error) {
	return e.listDirAs(ctx, sbxOK, tok)
}

// listDirAs is listDir for sandbox id.
func (e *testEnv) listDirAs(ctx context.Context, id, tok string) (envdResponse, error) {
	return e.do(ctx, envdRequest{method: http.MethodPost, path: "/filesystem.Filesystem/ListDir",
		contentType: "application/json", body: []byte(`{"path":"/home/user"}`),
		sandboxID: id, port: envdPort, token: tok})
}

// connectError decodes a Connect unary error body.
func connectError(t testing.TB, body []byte) (code, message string) {
	t.Helper()
	var e struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("not a Connect error body: %q: %v", body, err)
	}
	return e.Code, e.Message
}

// waitUntil calls probe until it reports done or deadline passes. It
// returns whether a probe succeeded and a summary of every probe outcome
// (description × count, in order). Probes run back to back with a short
// pause between them so the gateway is not flooded; the pause is a poll
// period, not a synchronisation.
func waitUntil(deadline time.Time, probe func(ctx context.Context) (done bool, desc string)) (bool, string) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var order []string
	counts := map[string]int{}
	summary := func() string {
		parts := make([]string, len(order))
		for i, d := range order {
			parts[i] = fmt.Sprintf("%q×%d", d, counts[d])
		}
		return strings.Join(parts, ", ")
	}
	for {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		done, desc := probe(ctx)
		cancel()
		if counts[desc] == 0 {
			order = append(order, desc)
		}
		counts[desc]++
		if done {
			return true, summary()
		}
		if !time.Now().Before(deadline) {
			return false, summary()
		}
		select {
		case <-tick.C:
		case <-time.After(time.Until(deadline)):
		}
	}
}

// droppedAtReload reports whether a request's outcome (an error's text,
// or a description ending in one) is its connection closed unanswered.
// Right after a reload a new connection can still reach the replaced
// server: Caddy binds each configuration's listener with SO_REUSEPORT,
// its reload returns once the old servers' Shutdown calls have been
// started, not once their listeners are closed (caddyhttp's App.Stop),
// the kernel resets the connections queued on the old socket when it
// closes, and net/http drops the first request of one the old server
// accepted as its Shutdown began (docs/runbook.md "Rollouts and
// draining"). No handler saw such a request, so a test sends it again on
// a new connection.
func droppedAtReload(outcome string) bool {
	return outcome == "EOF" || strings.HasSuffix(outcome, ": EOF") ||
		strings.HasSuffix(outcome, "unexpected EOF") || strings.Contains(outcome, "connection reset by peer")
}
