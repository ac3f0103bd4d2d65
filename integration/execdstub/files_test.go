package execdstub_test

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/integration/execdstub"
)

// part is one multipart part; filename "" makes it a plain form field.
type part struct{ name, filename, content string }

func multipartBody(t *testing.T, parts ...part) (io.Reader, http.Header) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		cd := `form-data; name="` + p.name + `"`
		if p.filename != "" {
			cd += `; filename="` + p.filename + `"`
		}
		h.Set("Content-Disposition", cd)
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write([]byte(p.content))
	}
	_ = mw.Close()
	return &buf, http.Header{"Content-Type": {mw.FormDataContentType()}}
}

// upload sends metadata/file pairs the way the Go SDK does (§X1.5): the
// metadata is a file part named "metadata" with filename "metadata".
func (e *env) upload(meta any, content string) (*http.Response, []byte) {
	e.t.Helper()
	body, hdr := multipartBody(e.t, part{"metadata", "metadata", mustJSON(meta)}, part{"file", "data.bin", content})
	return e.do("POST", "/files/upload", body, hdr)
}

func umask() os.FileMode {
	old := syscall.Umask(0)
	syscall.Umask(old)
	return os.FileMode(old)
}

// TestUpload pins §X1.5 upload rules and the §X1.7 transcript.
func TestUpload(t *testing.T) {
	e := newEnv(t, nil)
	resp, body := e.upload(map[string]any{"path": "/ws/sub/hello.txt", "mode": 644}, "hello world\n")
	expectEmpty200(t, resp, body)
	fi, err := os.Stat(e.host("ws/sub/hello.txt"))
	if err != nil || fi.Mode().Perm() != 0o644 || fi.Size() != 12 {
		t.Fatalf("uploaded file: %v %v", fi, err)
	}

	// Truncate on re-upload; mode omitted = no chmod: 0777 &^ umask.
	resp, body = e.upload(map[string]any{"path": "/ws/plain.txt"}, "long content")
	expectEmpty200(t, resp, body)
	resp, body = e.upload(map[string]any{"path": "/ws/plain.txt", "owner": "no-such-user-xyz", "group": "no-such-group-xyz"}, "short")
	expectEmpty200(t, resp, body)
	got, _ := os.ReadFile(e.host("ws/plain.txt"))
	fi, _ = os.Stat(e.host("ws/plain.txt"))
	if string(got) != "short" || fi.Mode().Perm() != 0o777&^umask() {
		t.Errorf("re-upload: %q %v", got, fi.Mode())
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Getuid() {
		t.Errorf("unknown owner: uid %d, want the stub's %d", st.Uid, os.Getuid())
	}

	// Two pairs in one request, paired by index.
	body2, hdr := multipartBody(t,
		part{"metadata", "m1", `{"path":"/multi/a.txt"}`}, part{"file", "f1", "A"},
		part{"metadata", "m2", `{"path":"/multi/b.txt","mode":600}`}, part{"file", "f2", "B"})
	resp, body = e.do("POST", "/files/upload", body2, hdr)
	expectEmpty200(t, resp, body)
	a, _ := os.ReadFile(e.host("multi/a.txt"))
	b, _ := os.ReadFile(e.host("multi/b.txt"))
	fb, _ := os.Stat(e.host("multi/b.txt"))
	if string(a) != "A" || string(b) != "B" || fb.Mode().Perm() != 0o600 {
		t.Errorf("multi upload: %q %q %v", a, b, fb.Mode())
	}

	cases := []struct {
		name   string
		parts  []part
		status int
		code   string
		msg    string
	}{
		{"metadata as a plain field", []part{{"metadata", "", `{"path":"/x"}`}, {"file", "f", "x"}},
			400, "INVALID_FILE_METADATA", "metadata file is missing"},
		{"no file part", []part{{"metadata", "metadata", `{"path":"/x"}`}},
			400, "INVALID_FILE_CONTENT", "file is missing"},
		{"file as a plain field", []part{{"metadata", "metadata", `{"path":"/x"}`}, {"file", "", "x"}},
			400, "INVALID_FILE_CONTENT", "file is missing"},
		{"count mismatch", []part{{"metadata", "m", `{"path":"/x"}`}, {"metadata", "m", `{"path":"/y"}`}, {"file", "f", "x"}},
			400, "INVALID_FILE", "metadata and file count mismatch: 2 vs 1"},
		{"empty path", []part{{"metadata", "m", `{"mode":644}`}, {"file", "f", "x"}},
			400, "INVALID_FILE_METADATA", "metadata path is empty"},
		{"bad metadata JSON", []part{{"metadata", "m", `{"path":1}`}, {"file", "f", "x"}},
			400, "INVALID_FILE_METADATA", "invalid metadata format. json: cannot unmarshal number into Go struct field FileMetadata.path of type string"},
		{"bad mode digits", []part{{"metadata", "m", `{"path":"/bad.txt","mode":999}`}, {"file", "f", "x"}},
			500, "RUNTIME_ERROR", `error chmoding file /bad.txt. strconv.ParseUint: parsing "999": invalid syntax`},
		{"target is a directory", []part{{"metadata", "m", `{"path":"/ws"}`}, {"file", "f", "x"}},
			500, "RUNTIME_ERROR", "error opening destination file /ws. open /ws: is a directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body, hdr := multipartBody(t, c.parts...)
			resp, b := e.do("POST", "/files/upload", body, hdr)
			expectJSONError(t, resp, b, c.status, c.code, c.msg)
		})
	}
	t.Run("not multipart", func(t *testing.T) {
		resp, b := e.do("POST", "/files/upload", bytesReader(`{"path":"/x"}`), http.Header{"Content-Type": {"application/json"}})
		expectJSONError(t, resp, b, 400, "INVALID_FILE", "multipart form is empty")
	})
}

// TestDownload pins §X1.5 download headers, ranges and the directory quirk.
func TestDownload(t *testing.T) {
	e := newEnv(t, nil)
	const content = "hello world\n"
	if err := os.MkdirAll(e.host("ws/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	file := e.host("ws/sub/hello.txt")
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	mtime := time.Date(2026, 11, 29, 15, 2, 47, 0, time.UTC)
	_ = os.Chtimes(file, mtime, mtime)
	q := "/files/download?path=" + url.QueryEscape("/ws/sub/hello.txt")

	resp, body := e.do("GET", q, nil, nil)
	for k, want := range map[string]string{
		"Content-Type": "application/octet-stream", "Content-Disposition": `attachment; filename="hello.txt"`,
		"Content-Length": "12", "Accept-Ranges": "bytes", "Last-Modified": mtime.Format(http.TimeFormat),
	} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if resp.StatusCode != 200 || string(body) != content {
		t.Errorf("full download %d %q", resp.StatusCode, body)
	}

	for _, c := range []struct{ rng, body, crange string }{
		{"bytes=0-4", "hello", "bytes 0-4/12"},
		{"bytes=6-", "world\n", "bytes 6-11/12"},
		{"bytes=-3", "ld\n", "bytes 9-11/12"},
		{"bytes=6-100", "world\n", "bytes 6-11/12"},
		{"bytes=0-1,5-6", "he", "bytes 0-1/12"},
	} {
		resp, body := e.do("GET", q, nil, http.Header{"Range": {c.rng}})
		if resp.StatusCode != 206 || string(body) != c.body || resp.Header.Get("Content-Range") != c.crange ||
			resp.Header.Get("Content-Length") != strconv.Itoa(len(c.body)) {
			t.Errorf("%s: %d %q %v", c.rng, resp.StatusCode, body, resp.Header)
		}
	}

	// A malformed range: 416 {"code":"UNKNOWN"}, but execd leaves the
	// octet-stream type and the file's Content-Length (12) in place, so the
	// 18-byte JSON body cannot be sent and the body breaks.
	for _, rng := range []string{"bytes=5-2", "items=0-1", "bytes=x-1"} {
		req := e.request("GET", q, nil, http.Header{"Range": {rng}})
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 416 || resp.Header.Get("Content-Type") != "application/octet-stream" ||
			resp.Header.Get("Content-Length") != "12" || rerr == nil {
			t.Errorf("%s: %d %v body %q err %v", rng, resp.StatusCode, resp.Header, b, rerr)
		}
	}

	resp, body = e.do("GET", "/files/download?path=/nope.txt", nil, nil)
	expectJSONError(t, resp, body, 404, "FILE_NOT_FOUND", "file not found. open /nope.txt: no such file or directory")
	resp, body = e.do("GET", "/files/download", nil, nil)
	expectJSONError(t, resp, body, 400, "MISSING_QUERY", "missing query parameter 'path'")

	if err := os.WriteFile(e.host("ws/héllo wörld.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	resp, _ = e.do("GET", "/files/download?path="+url.QueryEscape("/ws/héllo wörld.txt"), nil, nil)
	enc := url.PathEscape("héllo wörld.txt")
	if got, want := resp.Header.Get("Content-Disposition"), `attachment; filename="`+enc+`"; filename*=UTF-8''`+enc; got != want {
		t.Errorf("non-ASCII Content-Disposition %q, want %q", got, want)
	}

	// §X1.5: a directory gives 200, Content-Length 2^63-1, broken body.
	req := e.request("GET", "/files/download?path=/ws", nil, nil)
	dresp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, rerr := io.ReadAll(dresp.Body)
	dresp.Body.Close()
	if dresp.StatusCode != 200 || dresp.Header.Get("Content-Length") != "9223372036854775807" ||
		dresp.ContentLength != math.MaxInt64 || len(b) != 0 || rerr == nil {
		t.Errorf("directory download: %d %v body %q err %v", dresp.StatusCode, dresp.Header, b, rerr)
	}
}

// TestDownloadDirectoryOnTmpfs: with DirectoriesOnTmpfs a directory's
// download is execd's answer where tmpfs cannot seek a directory (§X1.5):
// 500 text/plain "seeker can't seek"; a file downloads as before.
func TestDownloadDirectoryOnTmpfs(t *testing.T) {
	e := newEnv(t, func(c *execdstub.Config) { c.DirectoriesOnTmpfs = true })
	if err := os.MkdirAll(e.host("ws/d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.host("ws/f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	resp, body := e.do("GET", "/files/download?path=/ws/d", nil, nil)
	if resp.StatusCode != 500 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") || string(body) != "seeker can't seek\n" {
		t.Errorf("directory download: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	if resp, body := e.do("GET", "/files/download?path=/ws/f", nil, nil); resp.StatusCode != 200 || string(body) != "x" {
		t.Errorf("file download: %d %q", resp.StatusCode, body)
	}
}

func decodeInfo(t *testing.T, body []byte) map[string]map[string]any {
	t.Helper()
	var m map[string]map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return m
}

// TestFilesInfo pins §X1.5 stat: key as sent, Lstat, HEAD vs v1.0.18.
func TestFilesInfo(t *testing.T) {
	for _, version := range []string{execdstub.VersionHEAD, execdstub.Version1018} {
		t.Run(version, func(t *testing.T) {
			e := newEnv(t, func(c *execdstub.Config) { c.Version = version })
			_ = os.MkdirAll(e.host("ws/sub"), 0o755)
			_ = os.Chmod(e.host("ws/sub"), 0o755)
			_ = os.WriteFile(e.host("ws/sub/hello.txt"), []byte("hello world\n"), 0o644)
			_ = os.Chmod(e.host("ws/sub/hello.txt"), 0o644)
			_ = os.Symlink("sub/hello.txt", e.host("ws/link"))
			fi, _ := os.Stat(e.host("ws/sub/hello.txt"))
			st := fi.Sys().(*syscall.Stat_t)
			owner := strconv.Itoa(int(st.Uid))
			if u, err := user.LookupId(owner); err == nil {
				owner = u.Username
			}

			asked := "/ws/sub/../sub/hello.txt"
			resp, body := e.do("GET", "/files/info?path="+url.QueryEscape(asked)+"&path=/ws/sub&path=/ws/link", nil, nil)
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json; charset=utf-8" {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			m := decodeInfo(t, body)
			f := m[asked]
			if f == nil || f["path"] != "/ws/sub/hello.txt" || f["size"] != float64(12) || f["mode"] != float64(644) || f["owner"] != owner {
				t.Errorf("file info %v", f)
			}
			if mt, err := time.Parse(time.RFC3339Nano, f["modified_at"].(string)); err != nil || !mt.Equal(fi.ModTime()) {
				t.Errorf("modified_at %v: %v", f["modified_at"], err)
			}
			if _, err := time.Parse(time.RFC3339Nano, f["created_at"].(string)); err != nil {
				t.Errorf("created_at: %v", err)
			}
			if m["/ws/sub"]["mode"] != float64(755) {
				t.Errorf("dir info %v", m["/ws/sub"])
			}
			link := m["/ws/link"]
			if version == execdstub.VersionHEAD {
				if f["type"] != "file" || m["/ws/sub"]["type"] != "directory" || link["type"] != "symlink" || link["size"] != float64(len("sub/hello.txt")) {
					t.Errorf("types: %v %v %v", f["type"], m["/ws/sub"]["type"], link)
				}
				resp, body = e.do("GET", "/files/info?path=/nope", nil, nil)
				expectJSONError(t, resp, body, 404, "FILE_NOT_FOUND", "file not found. file not found: /nope: lstat /nope: no such file or directory")
			} else {
				for _, v := range m {
					if _, ok := v["type"]; ok {
						t.Errorf("v1.0.18 FileInfo has type: %v", v)
					}
				}
				if link["size"] != float64(12) {
					t.Errorf("v1.0.18 follows symlinks: %v", link)
				}
				resp, body = e.do("GET", "/files/info?path=/nope", nil, nil)
				expectJSONError(t, resp, body, 500, "RUNTIME_ERROR", "error accessing file: file not found: /nope")
			}
			resp, body = e.do("GET", "/files/info", nil, nil)
			if resp.StatusCode != 200 || string(body) != "{}" {
				t.Errorf("no path: %d %s", resp.StatusCode, body)
			}
			// An owner without a name is its numeric id in /files/info on
			// both builds (v1.0.18's GetFileInfo falls back to it too);
			// only v1.0.18's /files/search fails on it.
			_ = os.WriteFile(e.host("ws/anon.txt"), []byte("x"), 0o644)
			if err := os.Chown(e.host("ws/anon.txt"), 4242, 4242); err != nil {
				t.Fatal(err)
			}
			resp, body = e.do("GET", "/files/info?path=/ws/anon.txt", nil, nil)
			if a := decodeInfo(t, body)["/ws/anon.txt"]; resp.StatusCode != 200 || a["owner"] != "4242" || a["group"] != "4242" {
				t.Errorf("anonymous owner: %d %s", resp.StatusCode, body)
			}
			resp, body = e.do("GET", "/files/search?path=/ws&pattern=anon.txt", nil, nil)
			if version == execdstub.VersionHEAD {
				if resp.StatusCode != 200 || !strings.Contains(string(body), `"owner":"4242"`) {
					t.Errorf("HEAD search with an anonymous owner: %d %s", resp.StatusCode, body)
				}
			} else if resp.StatusCode != 500 || !strings.Contains(string(body), "error lookup owner for file") {
				t.Errorf("v1.0.18 search with an anonymous owner: %d %s", resp.StatusCode, body)
			}
		})
	}
}

// TestDeleteFilesAndDirectories pins §X1.5 delete and the §X1.7 transcript.
func TestDeleteFilesAndDirectories(t *testing.T) {
	e := newEnv(t, nil)
	resp, body := e.do("POST", "/directories", bytesReader(`{"/ws/newdir/a/b":{"mode":700}}`), nil)
	expectEmpty200(t, resp, body)
	if fi, err := os.Stat(e.host("ws/newdir/a/b")); err != nil || fi.Mode().Perm() != 0o700 || !fi.IsDir() {
		t.Fatalf("mkdir: %v %v", fi, err)
	}
	resp, body = e.do("POST", "/directories", bytesReader(`[`), nil)
	expectJSONError(t, resp, body, 400, "INVALID_REQUEST_BODY", "error parsing request, MAYBE invalid body format. unexpected EOF")

	_ = os.WriteFile(e.host("ws/f1"), []byte("1"), 0o644)
	resp, body = e.do("DELETE", "/files?path=/ws/f1&path=/ws/missing", nil, nil)
	expectEmpty200(t, resp, body)
	if _, err := os.Stat(e.host("ws/f1")); !os.IsNotExist(err) {
		t.Errorf("file not deleted: %v", err)
	}

	_ = os.WriteFile(e.host("ws/f2"), []byte("2"), 0o644)
	resp, body = e.do("DELETE", "/files?path=/ws/f2&path=/ws/newdir", nil, nil)
	expectJSONError(t, resp, body, 500, "RUNTIME_ERROR", "error removing file /ws/newdir. path is a directory: /ws/newdir")
	if _, err := os.Stat(e.host("ws/f2")); !os.IsNotExist(err) {
		t.Errorf("paths before the failing one stay deleted: %v", err)
	}
	if _, err := os.Stat(e.host("ws/newdir")); err != nil {
		t.Errorf("directory removed by DELETE /files: %v", err)
	}

	resp, body = e.do("DELETE", "/directories?path=/ws/newdir&path=/ws/never", nil, nil)
	expectEmpty200(t, resp, body)
	if _, err := os.Stat(e.host("ws/newdir")); !os.IsNotExist(err) {
		t.Errorf("directory not removed: %v", err)
	}
}

func paths(t *testing.T, body []byte) (ps, types []string) {
	t.Helper()
	var list []map[string]any
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	for _, fi := range list {
		ps = append(ps, fi["path"].(string))
		if ty, ok := fi["type"].(string); ok {
			types = append(types, ty)
		}
	}
	return ps, types
}

func makeTree(t *testing.T, e *env) {
	t.Helper()
	for _, d := range []string{"ws/a/deep", "ws/empty"} {
		if err := os.MkdirAll(e.host(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"ws/b.txt", "ws/a/x.txt", "ws/a/deep/y.txt", "ws/a/z.log"} {
		if err := os.WriteFile(e.host(f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a", e.host("ws/link")); err != nil {
		t.Fatal(err)
	}
}

// TestListDirectory pins GET /directories/list (§X1.3, §X1.5; HEAD only).
func TestListDirectory(t *testing.T) {
	e := newEnv(t, nil)
	makeTree(t, e)
	cases := []struct {
		query string
		paths []string
		types []string
	}{
		{"path=/ws", []string{"/ws/a", "/ws/b.txt", "/ws/empty", "/ws/link"},
			[]string{"directory", "file", "directory", "symlink"}},
		{"path=/ws&depth=2", []string{"/ws/a", "/ws/a/deep", "/ws/a/x.txt", "/ws/a/z.log", "/ws/b.txt", "/ws/empty", "/ws/link"},
			[]string{"directory", "directory", "file", "file", "file", "directory", "symlink"}},
		{"path=/ws&depth=0", nil, nil},
		{"path=/ws/a/deep&depth=5", []string{"/ws/a/deep/y.txt"}, []string{"file"}},
	}
	for _, c := range cases {
		resp, body := e.do("GET", "/directories/list?"+c.query, nil, nil)
		ps, types := paths(t, body)
		if resp.StatusCode != 200 || !slices.Equal(ps, c.paths) || !slices.Equal(types, c.types) {
			t.Errorf("%s: %d %v %v", c.query, resp.StatusCode, ps, types)
		}
		if c.paths == nil && string(body) != "[]" {
			t.Errorf("%s: body %s, want []", c.query, body)
		}
	}
	for _, c := range []struct {
		query        string
		status       int
		code, msg    string
		plainNotJSON bool
	}{
		{"path=/ws/b.txt", 400, "INVALID_REQUEST_BODY", "path is not a directory: /ws/b.txt", false},
		{"path=/ws/link", 400, "INVALID_REQUEST_BODY", "path is a symbolic link, refusing to traverse: /ws/link", false},
		{"path=/ws/nope", 404, "FILE_NOT_FOUND", "file not found. lstat /ws/nope: no such file or directory", false},
		{"path=/ws&depth=-1", 400, "INVALID_REQUEST_BODY", "invalid query parameter 'depth': -1", false},
		{"depth=1", 400, "MISSING_QUERY", "missing query parameter 'path'", false},
	} {
		resp, body := e.do("GET", "/directories/list?"+c.query, nil, nil)
		expectJSONError(t, resp, body, c.status, c.code, c.msg)
	}

	old := newEnv(t, func(c *execdstub.Config) { c.Version = execdstub.Version1018 })
	resp, body := old.do("GET", "/directories/list?path=/", nil, nil)
	if resp.StatusCode != 404 || string(body) != "404 page not found" || resp.Header.Get("Content-Type") != "text/plain" {
		t.Errorf("v1.0.18 list: %d %q %q", resp.StatusCode, body, resp.Header.Get("Content-Type"))
	}
}

// TestSearchFiles pins GET /files/search (§X1.3, §X1.5): recursive,
// non-directories only, glob on the base name, default "**".
func TestSearchFiles(t *testing.T) {
	for _, version := range []string{execdstub.VersionHEAD, execdstub.Version1018} {
		t.Run(version, func(t *testing.T) {
			e := newEnv(t, func(c *execdstub.Config) { c.Version = version })
			makeTree(t, e)
			all := []string{"/ws/a/deep/y.txt", "/ws/a/x.txt", "/ws/a/z.log", "/ws/b.txt", "/ws/link"}
			for _, c := range []struct {
				pattern string
				want    []string
			}{
				{"", all},
				{"**", all},
				{"*", all},
				{"*.txt", []string{"/ws/a/deep/y.txt", "/ws/a/x.txt", "/ws/b.txt"}},
				{"{x,y}.txt", []string{"/ws/a/deep/y.txt", "/ws/a/x.txt"}},
				{"[!xy]*", []string{"/ws/a/z.log", "/ws/b.txt", "/ws/link"}},
				{"?.log", []string{"/ws/a/z.log"}},
				{"nomatch", nil},
			} {
				resp, body := e.do("GET", "/files/search?path=/ws&pattern="+url.QueryEscape(c.pattern), nil, nil)
				ps, types := paths(t, body)
				if resp.StatusCode != 200 || !slices.Equal(ps, c.want) {
					t.Errorf("pattern %q: %d %v", c.pattern, resp.StatusCode, ps)
				}
				if version == execdstub.Version1018 && len(types) != 0 {
					t.Errorf("v1.0.18 search has types %v", types)
				}
			}
			resp, body := e.do("GET", "/files/search?path=/ws&pattern=%5B", nil, nil)
			expectJSONError(t, resp, body, 500, "RUNTIME_ERROR", "error searching files. invalid pattern [: syntax error in pattern")
			resp, body = e.do("GET", "/files/search?path=/nope", nil, nil)
			expectJSONError(t, resp, body, 404, "FILE_NOT_FOUND", "file not found. stat /nope: no such file or directory")
			resp, body = e.do("GET", "/files/search", nil, nil)
			expectJSONError(t, resp, body, 400, "MISSING_QUERY", "missing query parameter 'path'")
		})
	}
}

// TestPathExpansion pins execd's $VAR / ~ expansion of request paths
// (execd source, pkg/util/pathutil; not in docs/wire-facts.md).
func TestPathExpansion(t *testing.T) {
	e := newEnv(t, func(c *execdstub.Config) { c.Home = "/home/me" })
	t.Setenv("EXECDSTUB_TEST_DIR", "ws")
	_ = os.MkdirAll(e.host("ws"), 0o755)
	_ = os.MkdirAll(e.host("home/me"), 0o755)
	_ = os.WriteFile(e.host("ws/f.txt"), []byte("v"), 0o644)
	_ = os.WriteFile(e.host("home/me/h.txt"), []byte("h"), 0o644)

	resp, body := e.do("GET", "/files/download?path="+url.QueryEscape("/${EXECDSTUB_TEST_DIR}/f.txt"), nil, nil)
	if resp.StatusCode != 200 || string(body) != "v" {
		t.Errorf("env expansion: %d %q", resp.StatusCode, body)
	}
	resp, body = e.do("GET", "/files/download?path="+url.QueryEscape("~/h.txt"), nil, nil)
	if resp.StatusCode != 200 || string(body) != "h" {
		t.Errorf("tilde expansion: %d %q", resp.StatusCode, body)
	}
	resp, body = e.do("GET", "/files/info?path="+url.QueryEscape("/$EXECDSTUB_UNDEFINED_XYZ/f"), nil, nil)
	expectJSONError(t, resp, body, 500, "RUNTIME_ERROR",
		"error accessing file: invalid path /$EXECDSTUB_UNDEFINED_XYZ/f: path references undefined environment variables: EXECDSTUB_UNDEFINED_XYZ")
}

// TestRenameFiles pins POST /files/mv (§1.3, §1.9; execd's RenameFile):
// dest's parent created, an existing dest refused, a missing source 404 on
// HEAD and 500 on v1.0.18.
func TestRenameFiles(t *testing.T) {
	for _, version := range []string{execdstub.VersionHEAD, execdstub.Version1018} {
		t.Run(version, func(t *testing.T) {
			e := newEnv(t, func(c *execdstub.Config) { c.Version = version })
			_ = os.MkdirAll(e.host("ws"), 0o755)
			_ = os.WriteFile(e.host("ws/a.txt"), []byte("A"), 0o644)
			_ = os.WriteFile(e.host("ws/b.txt"), []byte("B"), 0o644)
			resp, body := e.do("POST", "/files/mv", bytesReader(`[{"src":"/ws/a.txt","dest":"/ws/new/dir/a.txt"}]`), nil)
			expectEmpty200(t, resp, body)
			if b, err := os.ReadFile(e.host("ws/new/dir/a.txt")); err != nil || string(b) != "A" {
				t.Fatalf("moved: %q %v", b, err)
			}
			resp, body = e.do("POST", "/files/mv", bytesReader(`[{"src":"/ws/b.txt","dest":"/ws/new/dir/a.txt"}]`), nil)
			expectJSONError(t, resp, body, 500, "RUNTIME_ERROR", "error accessing file: destination path already exists: /ws/new/dir/a.txt")
			resp, body = e.do("POST", "/files/mv", bytesReader(`[{"src":"/ws/nope","dest":"/ws/x"}]`), nil)
			if version == execdstub.VersionHEAD {
				expectJSONError(t, resp, body, 404, "FILE_NOT_FOUND", "file not found. source path not found: /ws/nope: stat /ws/nope: no such file or directory")
			} else {
				expectJSONError(t, resp, body, 500, "RUNTIME_ERROR", "error accessing file: source path not found: /ws/nope")
			}
			resp, body = e.do("POST", "/files/mv", bytesReader(`{`), nil)
			if resp.StatusCode != 400 || !strings.Contains(string(body), "INVALID_REQUEST_BODY") {
				t.Fatalf("bad JSON: %d %s", resp.StatusCode, body)
			}
		})
	}
}
