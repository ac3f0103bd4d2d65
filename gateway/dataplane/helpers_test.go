package dataplane

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sandgate/sandgate/gateway/connect"
	"github.com/sandgate/sandgate/gateway/credential"
	"github.com/sandgate/sandgate/gateway/execd"
	"github.com/sandgate/sandgate/gateway/token"
	"github.com/sandgate/sandgate/integration/execdstub"
	"github.com/sandgate/sandgate/integration/fixedentry"
)

// fakeCredentials is an in-memory credential.Source.
type fakeCredentials struct {
	mu    sync.Mutex
	creds map[string]credential.Credential
	err   error
}

func (f *fakeCredentials) Lookup(_ context.Context, id string) (credential.Credential, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return credential.Credential{}, f.err
	}
	c, ok := f.creds[id]
	if !ok {
		return credential.Credential{}, credential.ErrNotFound
	}
	if !c.Enabled {
		return c, credential.ErrDisabled
	}
	return c, nil
}

func (f *fakeCredentials) set(c credential.Credential) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creds[c.ID] = c
}

type fakeClusters map[string]Cluster

func (f fakeClusters) Cluster(id string) (Cluster, bool) {
	c, ok := f[id]
	return c, ok
}

const testSandbox = "sbxtest1"

// testEnv is the data plane in front of the real stand-ins: the fixed entry
// with the OpenSandbox Ingress in URI mode, and execd behind it.
type testEnv struct {
	t        *testing.T
	root     string
	execd    *execdstub.Server
	ingress  *fixedentry.Ingress
	creds    *fakeCredentials
	key      token.SigningKey
	gateway  *httptest.Server
	handler  *Handler
	logs     *observer.ObservedLogs
	outcomes chan Outcome
	fe       *url.URL
	// cfg and deps built handler; current is the Handler the gateway
	// serves with (handler, until reload replaces it).
	cfg     Config
	deps    Deps
	current atomic.Pointer[Handler]
}

// reload replaces the Handler the gateway serves new requests with by one
// built from the same Config and Deps, as a `caddy reload` does (the
// requests in progress stay with the old one); shared, if not nil,
// replaces Deps.Shared. It returns the new Handler, also e.handler.
func (e *testEnv) reload(shared *Shared) *Handler {
	e.t.Helper()
	d := e.deps
	if shared != nil {
		d.Shared = shared
	}
	h, err := New(e.cfg, d)
	if err != nil {
		e.t.Fatal(err)
	}
	h.cleanupGrace = 0
	e.handler = h
	e.current.Store(h)
	return h
}

func (e *testEnv) fixedEntryURL() *url.URL { return e.fe }

type envOption func(*Config, *execdstub.Config)

func newTestEnv(t *testing.T, opts ...envOption) *testEnv {
	t.Helper()
	return newTestEnvDeps(t, nil, opts...)
}

// newTestEnvDeps is newTestEnv with deps adjusting the handler's Deps
// (nil: none).
func newTestEnvDeps(t *testing.T, deps func(*Deps), opts ...envOption) *testEnv {
	t.Helper()
	e := &testEnv{t: t, root: t.TempDir(), outcomes: make(chan Outcome, 64)}
	for _, d := range []string{"home/user", "root"} {
		if err := os.MkdirAll(filepath.Join(e.root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := Config{Users: map[string]User{"root": {UID: 0, GID: 0, Home: "/root"}}}
	xcfg := execdstub.Config{Root: e.root, GracefulShutdown: -1, PingInterval: time.Hour}
	for _, o := range opts {
		o(&cfg, &xcfg)
	}
	e.execd = execdstub.New(xcfg)
	t.Cleanup(e.execd.Close)
	execdSrv := httptest.NewServer(e.execd)
	t.Cleanup(execdSrv.Close)
	e.ingress = fixedentry.New()
	e.ingress.SetSandbox(testSandbox, fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1",
		Ports: map[int]string{execd.DefaultPort: execdSrv.Listener.Addr().String()}})
	feSrv := httptest.NewServer(e.ingress)
	t.Cleanup(feSrv.Close)
	fe, _ := url.Parse(feSrv.URL)

	keyFile := filepath.Join(t.TempDir(), "k.key")
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(secret)), 0o600); err != nil {
		t.Fatal(err)
	}
	var err error
	if e.key, err = token.LoadSigningKey("k1", "HS256", keyFile); err != nil {
		t.Fatal(err)
	}
	verifier, err := token.NewVerifier([]token.Key{e.key.Public()}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	e.creds = &fakeCredentials{creds: map[string]credential.Credential{
		"cred-a":   {ID: "cred-a", Enabled: true, ProjectNamespace: "ns", ClusterID: "cluster-a"},
		"cred-off": {ID: "cred-off", Enabled: false, ProjectNamespace: "ns", ClusterID: "cluster-a"},
		"cred-x":   {ID: "cred-x", Enabled: true, ProjectNamespace: "ns", ClusterID: "cluster-unknown"},
	}}
	core, logs := observer.New(zap.DebugLevel)
	e.logs = logs
	d := Deps{
		Tokens:      verifier,
		Credentials: e.creds,
		Clusters:    fakeClusters{"cluster-a": {ID: "cluster-a", FixedEntry: fe}},
		Execd:       &execd.Client{},
		Logger:      zap.New(core),
		Observe:     func(o Outcome) { e.outcomes <- o },
	}
	if deps != nil {
		deps(&d)
	}
	if d.Shared == nil {
		d.Shared = NewShared()
	}
	e.cfg, e.deps = cfg, d
	h, err := New(cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	// Most tests check a process's files right after its end: removed at
	// once, as before the grace (TestExtendedTwoStreamsOneProcess has it).
	h.cleanupGrace = 0
	e.fe, e.handler = fe, h
	e.current.Store(h)
	e.gateway = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { e.current.Load().ServeHTTP(w, r) }))
	t.Cleanup(e.gateway.Close)
	return e
}

// mint returns a token for credential cred and sandbox sbx.
func (e *testEnv) mint(cred, sbx string) string {
	e.t.Helper()
	tok, err := e.key.Mint(token.Target{CredentialID: cred, SandboxID: sbx, Port: EnvdPort}, time.Hour, time.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

// request builds a request to the gateway with the routing headers and a
// valid token for testSandbox.
func (e *testEnv) request(method, target string, body io.Reader) *http.Request {
	e.t.Helper()
	req, err := http.NewRequest(method, e.gateway.URL+target, body)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set(HeaderSandboxID, testSandbox)
	req.Header.Set(HeaderSandboxPort, "49983")
	req.Header.Set(HeaderAccessToken, e.mint("cred-a", testSandbox))
	return req
}

// testClient is the client of every request these tests send:
// http.DefaultClient's transport with a bound on the whole exchange, so
// that a request the test's ordering left waiting for ever fails the test
// (a bound on the test, not a measure: no request of these tests takes
// more than seconds).
var testClient = &http.Client{Timeout: 2 * time.Minute}

func (e *testEnv) do(req *http.Request) (*http.Response, []byte) {
	e.t.Helper()
	resp, err := testClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp, b
}

// unary sends a Connect unary JSON call.
func (e *testEnv) unary(method string, msg string) (*http.Response, []byte) {
	e.t.Helper()
	req := e.request(http.MethodPost, "/filesystem.Filesystem/"+method, bytes.NewReader([]byte(msg)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	return e.do(req)
}

// envelope frames a Connect stream request message.
func envelope(flags byte, payload []byte) []byte {
	b := make([]byte, 5, 5+len(payload))
	b[0] = flags
	binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
	return append(b, payload...)
}

// startRequest builds a Process/Start call.
func (e *testEnv) startRequest(msg string) *http.Request {
	e.t.Helper()
	req := e.request(http.MethodPost, "/process.Process/Start", bytes.NewReader(envelope(0, []byte(msg))))
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	return req
}

// frame is one decoded stream envelope.
type frame struct {
	flags byte
	json  map[string]any
	raw   string
}

// readFrame reads one envelope from r.
func readFrame(t *testing.T, r io.Reader) (frame, error) {
	t.Helper()
	flags, payload, err := connect.ReadEnvelope(r, 64<<20)
	if err != nil {
		return frame{}, err
	}
	f := frame{flags: flags, raw: string(payload)}
	if err := json.Unmarshal(payload, &f.json); err != nil {
		t.Fatalf("frame %q is not JSON: %v", payload, err)
	}
	return f, nil
}

// readFrames reads a whole stream.
func readFrames(t *testing.T, body []byte) []frame {
	t.Helper()
	r := bytes.NewReader(body)
	var out []frame
	for {
		f, err := readFrame(t, r)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("reading frames: %v (body %q)", err, body)
		}
		out = append(out, f)
	}
}

// waitOutcome returns the next request outcome.
func (e *testEnv) waitOutcome() Outcome {
	e.t.Helper()
	select {
	case o := <-e.outcomes:
		return o
	case <-time.After(10 * time.Second):
		e.t.Fatal("no request outcome within 10s")
		return Outcome{}
	}
}

// waitFor polls cond until it holds, failing the test with what after 10
// s: how these tests wait for a state another goroutine reaches, with no
// event to wait on.
func (e *testEnv) waitFor(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out after 10s waiting for %s", what)
		}
		<-tick.C
	}
}

func (e *testEnv) hostPath(p string) string { return filepath.Join(e.root, p) }

func (e *testEnv) writeFile(p, content string) {
	e.t.Helper()
	hp := e.hostPath(p)
	if err := os.MkdirAll(filepath.Dir(hp), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(hp, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

func tokenTarget(cred, sbx string) token.Target {
	return token.Target{CredentialID: cred, SandboxID: sbx, Port: EnvdPort}
}

func tokenVerifier(e *testEnv) (*token.Verifier, error) {
	return token.NewVerifier([]token.Key{e.key.Public()}, 5*time.Second)
}

func newClient() *execd.Client { return &execd.Client{} }
