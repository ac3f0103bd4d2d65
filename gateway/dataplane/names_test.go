package dataplane

import (
	"bytes"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"os"
	"strings"
	"testing"
)

// replacement is U+FFFD, what encoding/json turns invalid UTF-8 and
// unpaired surrogate escapes into.
const replacement = "\uFFFD"

// exists reports whether the sandbox path p exists in e's execd root.
func (e *testEnv) exists(p string) bool {
	_, err := os.Lstat(e.hostPath(p))
	return err == nil
}

// TestBreakConnectMessageNamesOnePath: a Connect message acts on the path
// it names as envd (protojson) reads it, or is refused. envd refuses a
// repeated member, invalid UTF-8 and an unpaired surrogate escape, and
// ignores a member whose name differs in case (it matches names exactly).
// encoding/json kept the last of two "path"s, matched "PATH" as "path",
// and read "a\xff" and "a\ud800" as "a\uFFFD": each Remove deleted a file
// the message did not name.
func TestBreakConnectMessageNamesOnePath(t *testing.T) {
	e := newTestEnv(t)
	e.writeFile("home/user/keep", "k")
	e.writeFile("home/user/victim", "v")
	e.writeFile("home/user/a"+replacement, "r")

	refused := []string{
		`{"path":"/home/user/keep","path":"/home/user/victim"}`,
		"{\"path\":\"/home/user/a\xff\"}",
		`{"path":"/home/user/a\ud800"}`,
		`{"path":"/home/user/a\udc00x"}`,
	}
	for _, msg := range refused {
		resp, body := e.unary("Remove", msg)
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get(ErrorHeader) != string(CodeBadRequest) ||
			!strings.Contains(string(body), `"code":"invalid_argument"`) {
			t.Errorf("Remove %q: %d %s %s; want 400 BAD_REQUEST invalid_argument", msg, resp.StatusCode,
				resp.Header.Get(ErrorHeader), body)
		}
		e.waitOutcome()
	}
	for _, p := range []string{"home/user/keep", "home/user/victim", "home/user/a" + replacement} {
		if !e.exists(p) {
			t.Errorf("%s was removed by a refused message", p)
		}
	}

	// A case variant is another (unknown) member, as in protojson: the
	// message names keep, and only keep goes.
	resp, body := e.unary("Remove", `{"path":"/home/user/keep","PATH":"/home/user/victim"}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("Remove with a case variant: %d %s", resp.StatusCode, body)
	}
	e.waitOutcome()
	if e.exists("home/user/keep") || !e.exists("home/user/victim") {
		t.Fatalf("Remove of keep with a PATH member: keep exists %v, victim exists %v",
			e.exists("home/user/keep"), e.exists("home/user/victim"))
	}

	// The same rules hold for a stream's message.
	resp, body = e.do(e.startRequest(`{"process":{"cmd":"/bin/true","cmd":"/bin/false"}}`))
	if f := readFrames(t, body); resp.StatusCode != http.StatusOK || len(f) != 1 ||
		!strings.Contains(f[0].raw, `"invalid_argument"`) || !strings.Contains(f[0].raw, "BAD_REQUEST") {
		t.Fatalf("Start with a repeated cmd: %d %q", resp.StatusCode, body)
	}
	e.waitOutcome()
}

// TestBreakWritePathNotUTF8: a /files path that is not valid UTF-8 is
// refused. execd's upload metadata is JSON, where such a path cannot be
// written: it became "\uFFFD", so the write landed on a file the request
// did not name and answered that file's path.
func TestBreakWritePathNotUTF8(t *testing.T) {
	e := newTestEnv(t)
	req := e.request(http.MethodPost, "/files?path=/home/user/b%FF", strings.NewReader("data"))
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, body := e.do(req)
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get(ErrorHeader) != string(CodeBadRequest) {
		t.Errorf("octet-stream write to b\\xff: %d %s %s; want 400 BAD_REQUEST", resp.StatusCode,
			resp.Header.Get(ErrorHeader), body)
	}
	e.waitOutcome()

	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", "form-data; name=\"file\"; filename=\"/home/user/c\xff\"")
	pw, _ := mw.CreatePart(h)
	_, _ = pw.Write([]byte("data"))
	_ = mw.Close()
	req = e.request(http.MethodPost, "/files", &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, body = e.do(req)
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get(ErrorHeader) != string(CodeBadRequest) {
		t.Errorf("multipart write to c\\xff: %d %s %s; want 400 BAD_REQUEST", resp.StatusCode,
			resp.Header.Get(ErrorHeader), body)
	}
	e.waitOutcome()

	for _, p := range []string{"home/user/b" + replacement, "home/user/c" + replacement} {
		if e.exists(p) {
			t.Errorf("%s was written by a write that named another path", p)
		}
	}
}
