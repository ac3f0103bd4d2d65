package dataplane

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/integration/execdstub"
)

func TestListDir(t *testing.T) {
	for _, version := range []string{execdstub.VersionHEAD, execdstub.Version1018} {
		t.Run(version, func(t *testing.T) {
			e := newTestEnv(t, func(_ *Config, x *execdstub.Config) { x.Version = version })
			e.writeFile("/home/user/d/a.txt", "hello world")
			e.writeFile("/home/user/d/sub/b.txt", "b")
			e.writeFile("/home/user/d/sub/deeper/c.txt", "c")
			mtime := time.Date(2026, 11, 29, 15, 5, 23, 775000000, time.UTC)
			if err := os.Chtimes(e.hostPath("/home/user/d/a.txt"), mtime, mtime); err != nil {
				t.Fatal(err)
			}
			list := func(msg string) []map[string]any {
				resp, body := e.unary("ListDir", msg)
				if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
					t.Fatalf("status %d body %s", resp.StatusCode, body)
				}
				var out struct{ Entries []map[string]any }
				if err := json.Unmarshal(body, &out); err != nil {
					t.Fatal(err)
				}
				return out.Entries
			}
			names := func(es []map[string]any) string {
				var s []string
				for _, e := range es {
					s = append(s, e["type"].(string)+":"+e["path"].(string))
				}
				return strings.Join(s, " ")
			}
			d1 := list(`{"path":"/home/user/d","depth":1}`)
			d2 := list("{\n  \"path\": \"d\",\n  \"depth\": 2\n}") // Python's pretty JSON, relative path
			d0 := list(`{"path":"/home/user/d"}`)                  // depth omitted = 1
			// v1.0.18 has no /directories/list; the gateway builds the same
			// listing (TestListDirSameOnV1018 compares them entry by entry).
			if got := names(d1); got != "FILE_TYPE_FILE:/home/user/d/a.txt FILE_TYPE_DIRECTORY:/home/user/d/sub" {
				t.Fatalf("depth 1: %s", got)
			}
			if got := names(d2); got != "FILE_TYPE_FILE:/home/user/d/a.txt FILE_TYPE_DIRECTORY:/home/user/d/sub FILE_TYPE_FILE:/home/user/d/sub/b.txt FILE_TYPE_DIRECTORY:/home/user/d/sub/deeper" {
				t.Fatalf("depth 2: %s", got)
			}
			if names(d0) != names(d1) {
				t.Fatalf("depth 0 %s != depth 1 %s", names(d0), names(d1))
			}
			a := d1[0]
			raw, _ := json.Marshal(a)
			// protobuf-JSON as envd writes it: size as a string, mode as the
			// permission bits, permissions as Go's FileMode string.
			want := regexp.MustCompile(`^\{"group":"[^"]+","mode":420,"modifiedTime":"2026-11-29T15:05:23\.775Z","name":"a\.txt","owner":"[^"]+","path":"/home/user/d/a\.txt","permissions":"-rw-r--r--","size":"11","type":"FILE_TYPE_FILE"\}$`)
			if !want.Match(raw) {
				t.Fatalf("entry %s", raw)
			}
			dir, _ := json.Marshal(d1[1])
			if !bytes.Contains(dir, []byte(`"mode":493,`)) || !bytes.Contains(dir, []byte(`"permissions":"drwxr-xr-x"`)) {
				t.Fatalf("dir entry %s", dir)
			}
		})
	}
}

// TestListDirSameOnV1018: on execd v1.0.18 (no /directories/list, and a
// /files/search that lists regular files only) ListDir answers exactly what
// it answers on execd HEAD for the same tree, at depth 1, 2 and 3: empty
// directories, dotfiles, odd names, files whose owner has no name (which
// fail v1.0.18's /files/search whole), symlinks (listed, not followed,
// resolved by one more command) and a FIFO included. The FIFO is
// FILE_TYPE_UNSPECIFIED on both (the SDKs leave it out of list());
// v1.0.18 gives it, and the symlinks, no size, owner or time.
func TestListDirSameOnV1018(t *testing.T) {
	head := newTestEnv(t)
	old := newTestEnv(t, func(_ *Config, x *execdstub.Config) { x.Version = execdstub.Version1018; x.Root = head.root })
	for p, content := range map[string]string{
		"/home/user/t/a.txt": "a", "/home/user/t/.hidden": "h", "/home/user/t/..dots": "d", "/home/user/t/sub/b.txt": "bb",
		"/home/user/t/sub/deeper/c.txt": "c", "/home/user/t/we ird 'name\"/ünï.txt": "u", "/home/user/t/nl\nname": "n",
		"/home/user/t/a-b/x": "x", "/home/user/t/a/y": "y",
	} {
		head.writeFile(p, content)
	}
	for _, d := range []string{"/home/user/t/empty", "/home/user/t/sub/emptier", "/home/user/t/sub/deeper/empty3"} {
		if err := os.MkdirAll(head.hostPath(d), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a.txt", head.hostPath("/home/user/t/link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub", head.hostPath("/home/user/t/dirlink")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(head.hostPath("/home/user/t/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(head.hostPath("/home/user/t/a.txt"), 4242, 4242); err != nil {
		t.Fatal(err)
	}
	list := func(e *testEnv, depth int) []map[string]any {
		resp, body := e.unary("ListDir", fmt.Sprintf(`{"path":"/home/user/t","depth":%d}`, depth))
		if resp.StatusCode != 200 {
			t.Fatalf("depth %d: %d %s", depth, resp.StatusCode, body)
		}
		var out struct{ Entries []map[string]any }
		if err := json.Unmarshal(body, &out); err != nil {
			t.Fatal(err)
		}
		for _, ent := range out.Entries {
			if ent["type"] == "FILE_TYPE_UNSPECIFIED" {
				for k := range ent {
					if k != "name" && k != "path" && k != "type" {
						delete(ent, k)
					}
				}
			}
			if ent["symlinkTarget"] != nil {
				delete(ent, "size")
				delete(ent, "owner")
				delete(ent, "group")
				delete(ent, "modifiedTime")
			}
		}
		return out.Entries
	}
	for _, depth := range []int{1, 2, 3} {
		want, got := list(head, depth), list(old, depth)
		if !reflect.DeepEqual(got, want) {
			w, _ := json.MarshalIndent(want, "", " ")
			g, _ := json.MarshalIndent(got, "", " ")
			t.Fatalf("depth %d: v1.0.18 listing\n%s\nHEAD listing\n%s", depth, g, w)
		}
		if len(want) < 10 {
			t.Fatalf("depth %d: only %d entries", depth, len(want))
		}
	}
	// A listing, then the symlinks' resolution; HEAD runs the second only.
	if n := len(old.execd.Commands()); n != 6 {
		t.Fatalf("v1.0.18 ran %d commands for 3 listings", n)
	}
	if n := len(head.execd.Commands()); n != 3 {
		t.Fatalf("HEAD ran %d commands for 3 listings", n)
	}
	for i, c := range old.execd.Commands() {
		if want := []string{"/home/user/", "/home/user/t"}[i%2]; c.Request.Cwd != want || c.Request.Uid != nil {
			t.Fatalf("command %d %+v, want execd's identity in %s", i, c.Request, want)
		}
	}
}

func TestListDirErrors(t *testing.T) {
	e := newTestEnv(t)
	e.writeFile("/home/user/file.txt", "x")
	if err := os.Symlink("file.txt", e.hostPath("/home/user/link")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(e.hostPath("/home/user/empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		msg, connect string
		status       int
		code         Code
	}{
		{`{"path":"/home/user/missing"}`, "not_found", 404, CodeFileNotFound},
		{`{"path":"/home/user/file.txt"}`, "invalid_argument", 400, CodeNotADirectory},
		{`{"path":""}`, "invalid_argument", 400, CodeBadRequest},
		{`{"path":"/x","depth":-1}`, "invalid_argument", 400, CodeBadRequest},
		{`{"path":"/x","depth":"many"}`, "invalid_argument", 400, CodeBadRequest},
		{`[]`, "invalid_argument", 400, CodeBadRequest},
		{``, "invalid_argument", 400, CodeBadRequest},
	}
	for _, tc := range cases {
		resp, body := e.unary("ListDir", tc.msg)
		var ce struct{ Code, Message string }
		_ = json.Unmarshal(body, &ce)
		if resp.StatusCode != tc.status || ce.Code != tc.connect || !strings.HasPrefix(ce.Message, string(tc.code)+": ") {
			t.Errorf("%s: status %d body %s", tc.msg, resp.StatusCode, body)
		}
	}
	// An empty directory is {"entries":[]}, valid JSON for both SDKs.
	resp, body := e.unary("ListDir", `{"path":"/home/user/empty"}`)
	if resp.StatusCode != 200 || string(body) != `{"entries":[]}` {
		t.Fatalf("empty dir: %d %s", resp.StatusCode, body)
	}
	// A symlink listed by execd is resolved: its target's type
	// (TestListDirSymlinks).
	_, body = e.unary("ListDir", `{"path":"/home/user"}`)
	if !bytes.Contains(body, []byte(`"name":"link","type":"FILE_TYPE_FILE"`)) {
		t.Fatalf("symlink entry: %s", body)
	}
	// A unary call must be application/json.
	req := e.request(http.MethodPost, "/filesystem.Filesystem/ListDir", strings.NewReader(`{"path":"/"}`))
	req.Header.Set("Content-Type", "application/proto")
	resp, body = e.do(req)
	if resp.StatusCode != 400 || !bytes.Contains(body, []byte(`"code":"invalid_argument"`)) {
		t.Fatalf("proto: %d %s", resp.StatusCode, body)
	}
	// Oversized message.
	req = e.request(http.MethodPost, "/filesystem.Filesystem/ListDir", strings.NewReader(`{"path":"`+strings.Repeat("a", 5<<20)+`"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, body = e.do(req)
	if resp.StatusCode != 400 || !bytes.Contains(body, []byte("too large")) {
		t.Fatalf("oversized: %d %.200s", resp.StatusCode, body)
	}
}

func TestRemove(t *testing.T) {
	for _, version := range []string{execdstub.VersionHEAD, execdstub.Version1018} {
		t.Run(version, func(t *testing.T) {
			e := newTestEnv(t, func(_ *Config, x *execdstub.Config) { x.Version = version })
			e.writeFile("/home/user/f.txt", "x")
			e.writeFile("/home/user/tree/a/b.txt", "x")
			for _, p := range []string{"f.txt", "/home/user/tree", "/home/user/never"} {
				resp, body := e.unary("Remove", `{"path":"`+p+`"}`)
				if resp.StatusCode != 200 || string(body) != "{}" {
					t.Fatalf("remove %s: %d %s", p, resp.StatusCode, body)
				}
			}
			for _, p := range []string{"/home/user/f.txt", "/home/user/tree"} {
				if _, err := os.Lstat(e.hostPath(p)); !os.IsNotExist(err) {
					t.Fatalf("%s still exists", p)
				}
			}
		})
	}
}

// TestUnsupportedRoutes: everything but the six operations is answered in
// the shape the SDK decodes (docs/wire-facts.md §E6.2, §E6.3), before any check.
func TestUnsupportedRoutes(t *testing.T) {
	e := newTestEnv(t)
	cases := []struct {
		method, path, ctype string
		status              int
		body                string
	}{
		{"POST", "/filesystem.Filesystem/Stat", "application/json", 501, `{"code":"unimplemented","message":"UNSUPPORTED_OPERATION: filesystem.Filesystem/Stat is not implemented by this gateway"}`},
		{"POST", "/process.Process/SendSignal", "application/json", 501, `{"code":"unimplemented","message":"UNSUPPORTED_OPERATION: process.Process/SendSignal is not implemented by this gateway"}`},
		{"POST", "/init", "application/json", 404, `{"code":404,"message":"RESERVED_ROUTE: This endpoint is reserved for the E2B control plane and is not reachable through the sandbox URL"}`},
		{"GET", "/envs", "", 501, `{"code":501,"message":"UNSUPPORTED_OPERATION: /envs is not implemented by this gateway"}`},
		{"GET", "/nothing/here", "", 404, `{"code":404,"message":"UNKNOWN_ROUTE: no such route"}`},
		{"PUT", "/files", "", 405, `{"code":405,"message":"METHOD_NOT_ALLOWED: PUT /files is not supported"}`},
	}
	for _, tc := range cases {
		req, _ := http.NewRequest(tc.method, e.gateway.URL+tc.path, strings.NewReader("{}"))
		if tc.ctype != "" {
			req.Header.Set("Content-Type", tc.ctype)
		}
		resp, body := e.do(req)
		if resp.StatusCode != tc.status || string(body) != tc.body {
			t.Errorf("%s %s: %d %s", tc.method, tc.path, resp.StatusCode, body)
		}
	}
	// Streams: HTTP 200 and an end-stream error.
	for _, p := range []string{"/process.Process/Connect", "/filesystem.Filesystem/WatchDir"} {
		req, _ := http.NewRequest("POST", e.gateway.URL+p, bytes.NewReader(envelope(0, []byte(`{}`))))
		req.Header.Set("Content-Type", "application/connect+json")
		resp, body := e.do(req)
		frames := readFrames(t, body)
		if resp.StatusCode != 200 || len(frames) != 1 || frames[0].flags != 2 || !strings.Contains(frames[0].raw, `"code":"unimplemented"`) {
			t.Errorf("%s: %d %q", p, resp.StatusCode, body)
		}
	}
}

// TestTokenTarget: without routing headers the target comes from the token
// only when token_target is on; a half-present pair is always refused.
func TestTokenTarget(t *testing.T) {
	e := newTestEnv(t, func(c *Config, _ *execdstub.Config) { c.TokenTarget = true })
	noHeaders := func(del ...string) (*http.Response, []byte) {
		req := e.request(http.MethodPost, "/filesystem.Filesystem/ListDir", strings.NewReader(`{"path":"/home/user"}`))
		req.Header.Set("Content-Type", "application/json")
		for _, h := range del {
			req.Header.Del(h)
		}
		return e.do(req)
	}
	if resp, body := noHeaders(HeaderSandboxID, HeaderSandboxPort); resp.StatusCode != 200 {
		t.Fatalf("token target on: %d %s", resp.StatusCode, body)
	}
	if reqs := e.ingress.Requests(); len(reqs) == 0 || reqs[len(reqs)-1].SandboxID != testSandbox {
		t.Fatalf("routed to %+v", reqs)
	}
	if resp, body := noHeaders(HeaderSandboxID); resp.StatusCode != 400 {
		t.Fatalf("port header alone: %d %s", resp.StatusCode, body)
	}

	off := newTestEnv(t)
	req := off.request(http.MethodPost, "/filesystem.Filesystem/ListDir", strings.NewReader(`{"path":"/home/user"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Del(HeaderSandboxID)
	req.Header.Del(HeaderSandboxPort)
	if resp, body := off.do(req); resp.StatusCode != 400 || resp.Header.Get(ErrorHeader) != string(CodeSandboxHeaderMissing) {
		t.Fatalf("token target off: %d %s", resp.StatusCode, body)
	}
}

// TestTokensNeverLogged: neither a valid nor a refused token appears in the
// logs or in an error body.
func TestTokensNeverLogged(t *testing.T) {
	e := newTestEnv(t)
	good := e.mint("cred-a", testSandbox)
	bad := good[:len(good)-4] + "AAAA"
	var bodies []string
	for _, tok := range []string{good, bad, e.mint("cred-off", testSandbox), e.mint("cred-a", "sbxother")} {
		req := e.request(http.MethodPost, "/filesystem.Filesystem/ListDir", strings.NewReader(`{"path":"/home/user"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(HeaderAccessToken, tok)
		_, body := e.do(req)
		bodies = append(bodies, string(body))
		if strings.Contains(string(body), tok) {
			t.Fatalf("token in response %s", body)
		}
	}
	if e.logs.Len() < 4 {
		t.Fatalf("expected a log line per request, got %d", e.logs.Len())
	}
	for _, entry := range e.logs.All() {
		line, _ := json.Marshal(entry.ContextMap())
		for _, tok := range []string{good, bad} {
			for _, part := range strings.Split(tok, ".") {
				if len(part) > 8 && strings.Contains(entry.Message+string(line), part) {
					t.Fatalf("token material in log %s %s", entry.Message, line)
				}
			}
		}
		ctx := entry.ContextMap()
		for _, k := range []string{"operation", "sandbox", "credential", "cluster", "outcome"} {
			if _, ok := ctx[k]; !ok {
				t.Fatalf("log line without %s: %v", k, ctx)
			}
		}
	}
}
