package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/integration/execdstub"
	"github.com/sandgate/sandgate/integration/fixedentry"
	"github.com/sandgate/sandgate/integration/harness"
	"github.com/sandgate/sandgate/internal/freeport"
)

// matrixRoutes are the SDK calls of the error matrix: every route of the
// gateway an SDK reaches, with extended_operations on.
var matrixRoutes = []string{"run", "connect", "list", "remove", "exists", "getInfo", "makeDir", "rename",
	"read", "write", "processes", "kill", "isRunning", "watchDir"}

// docRow is what docs/errors.md promises for one code.
type docRow struct {
	class        string // the JS class on every route
	healthFalse  bool   // isRunning() answers false
	healthRaises bool   // isRunning() raises SandboxError (not the class)
	existsFalse  bool   // files.exists answers false
	makeDirFalse bool   // files.makeDir answers false
	killFalse    bool   // commands.kill answers false
}

// readErrorsDoc parses docs/errors.md's code table.
func readErrorsDoc(t *testing.T, root string) map[string]docRow {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs/errors.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `([A-Z_]+)` \\|[^|]*\\|[^|]*\\|[^|]*\\|[^|]*\\| ([^|]*) \\|")
	class := regexp.MustCompile("`([A-Za-z]+)")
	out := map[string]docRow{}
	for _, line := range strings.Split(string(b), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		raises := m[2]
		r := docRow{
			healthFalse:  strings.Contains(raises, "`isRunning()` → `false`"),
			healthRaises: strings.Contains(raises, "`isRunning()` raises `SandboxError`"),
			existsFalse:  strings.Contains(raises, "`files.exists` → `false`"),
			makeDirFalse: strings.Contains(raises, "`files.makeDir` → `false`"),
			killFalse:    strings.Contains(raises, "`commands.kill` → `false`"),
		}
		if c := class.FindStringSubmatch(raises); c != nil {
			r.class = c[1]
		}
		out[m[1]] = r
	}
	if len(out) < 30 {
		t.Fatalf("docs/errors.md: only %d codes parsed", len(out))
	}
	return out
}

// matrixRow triggers one code on some routes.
type matrixRow struct {
	code   string
	id     string   // the sandbox the SDK connects to
	routes []string // default matrixRoutes
	env    []string // extra sdk.mjs environment (arguments)
	// viaProxy: the SDK's sandboxUrl is a proxy that applies this to every
	// request on its way to the gateway.
	viaProxy func(*http.Request)
}

// noSDKRoute are the codes no SDK call can produce, and where they are
// tested instead.
var noSDKRoute = map[string]string{
	"UNKNOWN_ROUTE":      "a path no envd route has: TestRawHTTPCheckOrder",
	"RESERVED_ROUTE":     "envd's orchestrator routes: TestRawHTTPCheckOrder",
	"METHOD_NOT_ALLOWED": "a wrong method: TestRawHTTPCheckOrder",
	"CANCELED":           "the client is gone and sees nothing: TestProcessStartOutlivesClient, testDisconnect",
	"GATEWAY_DRAINING":   "a replica shutting down: TestDrainEndsLongStreams",
	"PTY_ATTACHED":       "a terminal another replica's stream holds, or a follower whose holding stream ended: TestPTYAttachedElsewhere, TestPTYFollowerWhenTheHolderLeaves (gateway/dataplane)",
	"UNSUPPORTED_OPERATION": "with extended_operations every SDK call is served; without it the extended ones are not: " +
		"TestExtendedOff, TestPTYRefusals, TestExtendedProcessErrors (gateway/dataplane)",
	"WATCHER_NOT_FOUND": "the Python SDK's watch handle (no JS SDK call uses watchers): TestWatchers (gateway/dataplane), " +
		"TestWatcherWithThePythonSDK (integration/realpeers)",
}

// TestErrorCodesEveryRoute: every code of docs/errors.md, on every route
// an SDK reaches, with both JS SDKs through the built gateway (with
// extended_operations, so all routes exist): each SDK raises the class the
// document names for the code (or answers false where it says so), on
// every route, and the message carries the code. Each code is produced by
// what produces it in production: a token, a credential source, a
// cluster, the OpenSandbox Ingress stand-in, execd, or a request the SDK
// sends; a fault-injecting execd only for EXECD_FAILED (500) and
// EXECD_PROTOCOL (an undocumented answer), and a header-rewriting proxy in
// front of the gateway for the headers the SDKs always send right.
func TestErrorCodesEveryRoute(t *testing.T) {
	root := requirePeers(t)
	doc := readErrorsDoc(t, root)

	// The credential source: a Portal answering by id.
	creds := map[string]string{
		"cred-a":         `{"id":"cred-a","enabled":true,"resourceSpecId":"s","resourceGroupId":"g","projectNamespace":"ns","clusterId":"cluster-a"}`,
		"cred-off":       `{"id":"cred-off","enabled":false,"resourceSpecId":"s","resourceGroupId":"g","projectNamespace":"ns","clusterId":"cluster-a"}`,
		"cred-elsewhere": `{"id":"cred-elsewhere","enabled":true,"resourceSpecId":"s","resourceGroupId":"g","projectNamespace":"ns","clusterId":"cluster-z"}`,
		"cred-dead":      `{"id":"cred-dead","enabled":true,"resourceSpecId":"s","resourceGroupId":"g","projectNamespace":"ns","clusterId":"cluster-dead"}`,
		"cred-slow":      `{"id":"cred-slow","enabled":true,"resourceSpecId":"s","resourceGroupId":"g","projectNamespace":"ns","clusterId":"cluster-slow"}`,
		"cred-prefix":    `{"id":"cred-prefix","enabled":true,"resourceSpecId":"s","resourceGroupId":"g","projectNamespace":"ns","clusterId":"cluster-prefixed"}`,
	}
	portal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimPrefix(r.URL.Path, "/credentials/")
		switch {
		case id == "cred-broken":
			http.Error(w, "portal is down", http.StatusInternalServerError)
		case creds[id] != "":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(creds[id]))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(portal.Close)
	// A fixed entry that refuses connections, and one that never answers.
	deadAddr, held, err := freeport.Refusing()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Close() })
	hang := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-hang }))
	t.Cleanup(func() { close(hang); slow.Close() })
	// execd answering 500 RUNTIME_ERROR, and execd answering what it never does.
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"code":"RUNTIME_ERROR","message":"boom"}`))
	}))
	t.Cleanup(failing.Close)
	garbled := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		_, _ = w.Write([]byte("I'm a teapot"))
	}))
	t.Cleanup(garbled.Close)
	// execd that starts every answer and never ends it: the calls to it
	// hold their slots of the gateway's per-sandbox bound.
	busyHeld, busyDone := make(chan struct{}, 16), make(chan struct{})
	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("["))
		http.NewResponseController(w).Flush()
		busyHeld <- struct{}{}
		<-busyDone
	}))
	t.Cleanup(func() { close(busyDone); busy.Close() })
	// corectl's sandbox authorizer: refusing, or down, for chosen sandboxes.
	authz := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Query().Get("sandbox") {
		case "sbxdeleting":
			_, _ = w.Write([]byte(`{"allowed":false,"reason":"deleting"}`))
		case "sbxpast":
			_, _ = w.Write([]byte(`{"allowed":false,"reason":"expired"}`))
		case "sbxauthzdown":
			http.Error(w, "corectl is down", http.StatusInternalServerError)
		default:
			_, _ = w.Write([]byte(`{"allowed":true}`))
		}
	}))
	t.Cleanup(authz.Close)

	caddyfile := `{
	admin {{ADMIN}}
	auto_https off
	default_bind 127.0.0.1
	persist_config off
	sandgate {
		token_key primary HS256 {{KEY}}
		credentials http ` + portal.URL + `/credentials/{id} {
			cache_ttl 1ms
		}
		authorizer http ` + authz.URL + `
		cluster cluster-a {{FIXED_ENTRY}}
		cluster cluster-dead http://` + deadAddr + `
		cluster cluster-slow ` + slow.URL + `
		cluster cluster-prefixed {{FIXED_ENTRY}}/misconfigured
	}
}

http://{{ADDR}} {
	e2b_dataplane {
		home_dir /home/user
		user root 0 0 /root
		extended_operations
		max_decompressed_size 16KiB
		upstream_wait 10s
		transport http {
			dial_timeout 2s
			response_header_timeout 3s
		}
	}
}
`
	otherKey := otherSigningKey(t)
	grants := map[string]harness.Grant{
		sbxOK:           {CredentialID: "cred-a"},
		"Bad_ID":        {CredentialID: "cred-a"},
		"sbxnotoken":    {CredentialID: "cred-a", NoToken: true},
		"sbxbadtoken":   {CredentialID: "cred-a", Key: &otherKey},
		"sbxexpired":    {CredentialID: "cred-a", TTL: -time.Hour},
		"sbxnocred":     {CredentialID: "cred-gone"},
		"sbxdisabled":   {CredentialID: "cred-off"},
		"sbxcredbroken": {CredentialID: "cred-broken"},
		"sbxwrong":      {CredentialID: "cred-a", SandboxID: sbxOK},
		"sbxnocluster":  {CredentialID: "cred-elsewhere"},
		"sbxgone":       {CredentialID: "cred-a"},
		"sbxnotready":   {CredentialID: "cred-a"},
		"sbxprefix":     {CredentialID: "cred-prefix"},
		"sbxdead":       {CredentialID: "cred-dead"},
		"sbxunreach":    {CredentialID: "cred-a"},
		"sbxslow":       {CredentialID: "cred-slow"},
		"sbxlocked":     {CredentialID: "cred-a"},
		"sbxfailing":    {CredentialID: "cred-a"},
		"sbxgarbled":    {CredentialID: "cred-a"},
		"sbxdeleting":   {CredentialID: "cred-a"},
		"sbxpast":       {CredentialID: "cred-a"},
		"sbxauthzdown":  {CredentialID: "cred-a"},
		"sbxbusy":       {CredentialID: "cred-a"},
	}
	e := startEnv(t, func(c *harness.Config) {
		c.Caddyfile = caddyfile
		c.Grants = grants
		c.Sandboxes = []string{sbxOK}
	})
	locked := execdstub.New(execdstub.Config{Root: e.Root, AccessToken: "execd-secret", GracefulShutdown: -1})
	lockedSrv := httptest.NewServer(locked)
	t.Cleanup(func() { locked.Close(); lockedSrv.Close() })
	sb := func(addr string) fixedentry.Sandbox {
		return fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1", Namespace: "default", Ports: map[int]string{44772: addr}}
	}
	e.Ingress.SetSandbox("sbxnotready", fixedentry.Sandbox{Ready: false, Endpoint: "127.0.0.1", Namespace: "default"})
	e.Ingress.SetSandbox("sbxunreach", sb(deadAddr))
	e.Ingress.SetSandbox("sbxlocked", sb(lockedSrv.Listener.Addr().String()))
	e.Ingress.SetSandbox("sbxfailing", sb(failing.Listener.Addr().String()))
	e.Ingress.SetSandbox("sbxgarbled", sb(garbled.Listener.Addr().String()))
	e.Ingress.SetSandbox("sbxbusy", sb(busy.Listener.Addr().String()))
	// Four listings of sbxbusy hold its four slots (the default
	// max_upstream_calls_per_sandbox) for the whole test: its SDK calls wait
	// upstream_wait and get GATEWAY_BUSY.
	holdCtx, release := context.WithCancel(context.Background())
	t.Cleanup(release)
	busyTok := e.mint("sbxbusy", grants["sbxbusy"])
	for range 4 {
		go func() { _, _ = e.listDirAs(holdCtx, "sbxbusy", busyTok) }()
	}
	for range 4 {
		<-busyHeld
	}
	for _, id := range []string{"sbxnotoken", "sbxbadtoken", "sbxexpired", "sbxnocred", "sbxdisabled", "sbxcredbroken",
		"sbxwrong", "sbxnocluster", "sbxprefix", "sbxdead", "sbxslow", "sbxdeleting", "sbxpast", "sbxauthzdown"} {
		e.Ingress.SetSandbox(id, sb(e.ExecdAddr)) // reachable, were the gateway to let them through
	}
	gw, _ := url.Parse(e.Gateway)
	proxy := func(mutate func(*http.Request)) string {
		rp := httputil.NewSingleHostReverseProxy(gw)
		rp.FlushInterval = -1
		director := rp.Director
		rp.Director = func(r *http.Request) { director(r); mutate(r) }
		s := httptest.NewServer(rp)
		t.Cleanup(s.Close)
		return s.URL
	}

	dir := "/home/user/matrix"
	e.mkdir(dir + "/adir/sub")
	if err := os.WriteFile(e.host(dir+"/afile"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.host(dir+"/bfile"), []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	nul := dir + "/a\x00b"
	allBut := func(except ...string) []string {
		return slices.DeleteFunc(slices.Clone(matrixRoutes), func(r string) bool { return slices.Contains(except, r) })
	}
	pre := func(code, id string) matrixRow { return matrixRow{code: code, id: id} }
	rows := []matrixRow{
		{code: "STDIN_UNAVAILABLE", id: sbxOK, routes: []string{"sendStdin"}, env: []string{"START_BG=sleep 30"}},
		{code: "SANDBOX_HEADER_MISSING", id: sbxOK, viaProxy: func(r *http.Request) { r.Header.Del("E2b-Sandbox-Id") }},
		pre("SANDBOX_ID_INVALID", "Bad_ID"),
		{code: "SANDBOX_PORT_INVALID", id: sbxOK, viaProxy: func(r *http.Request) { r.Header.Set("E2b-Sandbox-Port", "44772") }},
		{code: "BAD_REQUEST", id: sbxOK, routes: allBut("connect", "processes", "kill", "isRunning"),
			env: []string{"P=" + nul, "P2=" + nul, "CMD=echo a\x00b"}},
		{code: "USER_UNKNOWN", id: sbxOK, routes: allBut("connect", "processes", "kill", "isRunning"), env: []string{"USER_NAME=nobody"}},
		pre("TOKEN_MISSING", "sbxnotoken"),
		pre("TOKEN_INVALID", "sbxbadtoken"),
		pre("TOKEN_EXPIRED", "sbxexpired"),
		pre("CREDENTIAL_NOT_FOUND", "sbxnocred"),
		pre("CREDENTIAL_DISABLED", "sbxdisabled"),
		pre("CREDENTIAL_UNAVAILABLE", "sbxcredbroken"),
		pre("TARGET_MISMATCH", "sbxwrong"),
		pre("CLUSTER_UNKNOWN", "sbxnocluster"),
		pre("SANDBOX_NOT_FOUND", "sbxgone"),
		pre("SANDBOX_NOT_READY", "sbxnotready"),
		pre("INGRESS_ROUTE_REJECTED", "sbxprefix"),
		pre("FIXED_ENTRY_UNREACHABLE", "sbxdead"),
		pre("SANDBOX_UNREACHABLE", "sbxunreach"),
		pre("UPSTREAM_TIMEOUT", "sbxslow"),
		{code: "EXECD_REJECTED", id: sbxOK, routes: []string{"run"}, env: []string{"CWD=" + dir + "/nope"}},
		pre("SANDBOX_DELETING", "sbxdeleting"),
		pre("SANDBOX_EXPIRED", "sbxpast"),
		pre("AUTHORIZER_UNAVAILABLE", "sbxauthzdown"),
		{code: "WRITE_TOO_LARGE", id: sbxOK, routes: []string{"writeGzip"}},
		pre("EXECD_UNAUTHORIZED", "sbxlocked"),
		pre("EXECD_FAILED", "sbxfailing"),
		pre("EXECD_PROTOCOL", "sbxgarbled"),
		{code: "FILE_NOT_FOUND", id: sbxOK, routes: []string{"list", "exists", "getInfo", "rename", "read"}, env: []string{"P=" + dir + "/nope"}},
		{code: "IS_A_DIRECTORY", id: sbxOK, routes: []string{"read"}, env: []string{"P=" + dir + "/adir"}},
		{code: "NOT_A_DIRECTORY", id: sbxOK, routes: []string{"list", "makeDir"}, env: []string{"P=" + dir + "/afile"}},
		{code: "FILE_EXISTS", id: sbxOK, routes: []string{"makeDir"}, env: []string{"P=" + dir + "/adir"}},
		{code: "FILE_EXISTS", id: sbxOK, routes: []string{"rename"}, env: []string{"P=" + dir + "/afile", "P2=" + dir + "/bfile"}},
		{code: "PROCESS_NOT_FOUND", id: sbxOK, routes: []string{"connect", "kill"}, env: []string{"PID=12345"}},
		{code: "COMMAND_TIMEOUT", id: sbxOK, routes: []string{"run"}, env: []string{"CMD=sleep 30", "TIMEOUT_MS=1500"}},
		{code: "COMMAND_TIMEOUT", id: sbxOK, routes: []string{"connect"}, env: []string{"START_BG=sleep 30", "TIMEOUT_MS=1500"}},
		// The unary routes take a slot; reads, writes, command streams and
		// the health check do not.
		{code: "GATEWAY_BUSY", id: "sbxbusy", routes: []string{"list", "remove", "exists", "getInfo", "makeDir", "rename", "processes", "kill"},
			env: []string{"PID=12345"}},
	}

	// Every documented code is in the matrix or has no SDK route.
	covered := map[string]bool{}
	for _, r := range rows {
		covered[r.code] = true
	}
	for code := range doc {
		if !covered[code] && noSDKRoute[code] == "" {
			t.Errorf("docs/errors.md lists %s, which the matrix does not produce", code)
		}
	}

	// One SDK process per version runs every row at once.
	type planRow struct {
		Name       string            `json:"name"`
		ID         string            `json:"id"`
		SandboxURL string            `json:"sandboxUrl,omitempty"`
		Routes     []string          `json:"routes"`
		Args       map[string]string `json:"args,omitempty"`
	}
	var plan []planRow
	for _, row := range rows {
		routes := row.routes
		if routes == nil {
			routes = matrixRoutes
		}
		pr := planRow{Name: row.code + "/" + strings.Join(routes, ","), ID: row.id, Routes: routes, Args: map[string]string{}}
		for _, kv := range row.env {
			k, v, _ := strings.Cut(kv, "=")
			pr.Args[k] = v
		}
		if row.viaProxy != nil {
			pr.SandboxURL = proxy(row.viaProxy)
		}
		plan = append(plan, pr)
	}
	for _, pkg := range sdkPackages {
		t.Run(pkg, func(t *testing.T) {
			var got map[string]attempt
			e.runSDK(t, pkg, "matrix", sbxOK, &got, "SCENARIO_DIR="+dir, "PLAN="+mustJSON(plan))
			for i, row := range rows {
				pr := plan[i]
				t.Run(pr.Name, func(t *testing.T) {
					a := got[pr.Name]
					if !a.OK {
						t.Fatalf("the row failed before its calls: %+v", a.Error)
					}
					var cells map[string]attempt
					if err := json.Unmarshal(a.Value, &cells); err != nil {
						t.Fatalf("%s: %v", a.Value, err)
					}
					for _, route := range pr.Routes {
						checkMatrixCell(t, row.code, route, doc[row.code], cells[route])
					}
				})
			}
		})
	}
}

// checkMatrixCell checks one SDK call against docs/errors.md's promise.
func checkMatrixCell(t *testing.T, code, route string, d docRow, a attempt) {
	t.Helper()
	wantValue := func(v bool) {
		if !a.OK || string(a.Value) != fmt.Sprint(v) {
			t.Errorf("%s: %s answered %s (error %+v), want %v", code, route, a.Value, a.Error, v)
		}
	}
	switch {
	case route == "isRunning" && d.healthFalse:
		wantValue(false)
		return
	case route == "exists" && d.existsFalse, route == "makeDir" && d.makeDirFalse, route == "kill" && d.killFalse:
		wantValue(false)
		return
	}
	class := d.class
	if route == "isRunning" && d.healthRaises {
		class = "SandboxError"
	}
	// The SDK sends the command's timeout as Connect-Timeout-Ms and
	// enforces it itself too: its own deadline usually fires first, with
	// the same class and its own message.
	selfEnforced := code == "COMMAND_TIMEOUT"
	if a.OK || a.Error == nil {
		t.Errorf("%s: %s succeeded (%s), want %s", code, route, a.Value, class)
		return
	}
	if a.Error.Name != class || !(selfEnforced || strings.Contains(a.Error.Message, code)) {
		raw, _ := json.Marshal(a.Error)
		t.Errorf("%s: %s raised %s, want %s with the code in its message", code, route, raw, class)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
