package realpeers_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/textproto"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/integration/execdstub"
)

// wireCase is one request of the execd conformance table
// (docs/wire-facts.md §X4), sent in order to the real execd and to
// integration/execdstub imitating the same version.
type wireCase struct {
	name         string
	method, path string
	// header is sent with the request.
	header map[string]string
	// body builds the request body and its content type; nil sends none.
	body func() (io.Reader, string)
	// known lists the parts of the normalised answer ("status",
	// "content-type", "body") in which the stand-in may differ from the
	// real execd, with why; any other difference fails the test.
	known map[string]string
}

// confDir is the sandbox directory the table works in.
const confDir = "/home/user/conf"

// wireCases is the table; docs/wire-facts.md §X4 lists the same cases.
var wireCases = []wireCase{
	{name: "ping", method: "GET", path: "/ping"},
	{name: "HEAD ping is not routed", method: "HEAD", path: "/ping"},
	{name: "unrouted path", method: "GET", path: "/no/such/route"},
	{name: "command with exit 3", method: "POST", path: "/command",
		body: jsonBody(`{"command":"echo hi; echo err >&2; exit 3"}`)},
	{name: "command output lines", method: "POST", path: "/command",
		body: jsonBody(`{"command":"printf 'a\\n\\nb'"}`)},
	{name: "command in a missing cwd", method: "POST", path: "/command",
		body: jsonBody(`{"command":"true","cwd":"/no/such/dir"}`)},
	{name: "upload", method: "POST", path: "/files/upload", body: uploadBody(confDir+"/sub/hello.txt", "hello world\n")},
	{name: "upload with a plain metadata field", method: "POST", path: "/files/upload", body: plainMetadataUpload(confDir + "/plain.txt")},
	{name: "download a missing file", method: "GET", path: "/files/download?path=" + confDir + "/missing"},
	{name: "delete a missing file", method: "DELETE", path: "/files?path=" + confDir + "/missing"},
	{name: "download a range", method: "GET", path: "/files/download?path=" + confDir + "/sub/hello.txt",
		header: map[string]string{"Range": "bytes=0-4"}},
	{name: "stat a file", method: "GET", path: "/files/info?path=" + confDir + "/sub/hello.txt"},
	{name: "stat a missing path", method: "GET", path: "/files/info?path=" + confDir + "/missing"},
	{name: "list a directory", method: "GET", path: "/directories/list?path=" + confDir + "&depth=2"},
	{name: "search", method: "GET", path: "/files/search?path=" + confDir + "&pattern=*"},
	{name: "delete a directory as a file", method: "DELETE", path: "/files?path=" + confDir + "/sub"},
	{name: "delete a directory", method: "DELETE", path: "/directories?path=" + confDir},
	{name: "stat after delete", method: "GET", path: "/files/info?path=" + confDir + "/sub/hello.txt"},
}

// TestExecdConformance sends wireCases to the real execd (each version)
// and to the stand-in imitating it, and fails on any difference of
// status, content type or normalised body that the case does not list as
// known.
func TestExecdConformance(t *testing.T) {
	requireTier(t)
	for _, version := range execdVersions {
		t.Run("execd-"+version, func(t *testing.T) {
			w.startExecd(t, version)
			stubVersion := execdstub.VersionHEAD
			if version == "v1.0.18" {
				stubVersion = execdstub.Version1018
			}
			root := t.TempDir()
			if err := os.MkdirAll(filepath.Join(root, "home/user"), 0o755); err != nil {
				t.Fatal(err)
			}
			stub := execdstub.New(execdstub.Config{Root: root, Version: stubVersion, GracefulShutdown: -1})
			t.Cleanup(stub.Close)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: stub, ReadHeaderTimeout: 10 * time.Second}
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { _ = srv.Close() })

			execdURL, standIn := "http://"+probeIP+":44772", "http://"+ln.Addr().String()
			for _, c := range wireCases {
				want := send(t, execdURL, c)
				got := send(t, standIn, c)
				t.Logf("%s: %s %s %q", c.name, want["status"], want["content-type"], want["body"])
				for _, part := range []string{"status", "content-type", "body"} {
					if want[part] == got[part] {
						continue
					}
					if why, ok := c.known[part]; ok {
						t.Logf("%s: known difference in %s (%s): execd %q, stand-in %q", c.name, part, why, want[part], got[part])
						continue
					}
					t.Errorf("%s: %s differs: execd %s gives %q, the stand-in %q", c.name, part, version, want[part], got[part])
				}
			}
		})
	}
}

// send sends c to base and returns its normalised answer: "status",
// "content-type" and "body" (normalise).
func send(t *testing.T, base string, c wireCase) map[string]string {
	t.Helper()
	var body io.Reader
	ctype := ""
	if c.body != nil {
		body, ctype = c.body()
	}
	req, err := http.NewRequest(c.method, base+c.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	hc := http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s: %s %s: %v", c.name, c.method, base+c.path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatalf("%s: read the answer: %v", c.name, err)
	}
	ct := resp.Header.Get("Content-Type")
	return map[string]string{"status": fmt.Sprint(resp.StatusCode), "content-type": ct, "body": normalise(ct, b)}
}

// volatile are the JSON members that differ from run to run or from host
// to host: times, IDs, owners. A directory's size is dropped too.
var volatile = map[string]bool{"timestamp": true, "modified_at": true, "created_at": true, "owner": true, "group": true,
	"execution_time": true}

// normalise makes a body comparable: an event stream becomes its events
// without pings (the init ID dropped, an error as its exit value) and its
// stdout and stderr lines, each in its own order; JSON is re-encoded with volatile members dropped and keys
// sorted; anything else stays as it is.
func normalise(ctype string, b []byte) string {
	switch {
	case strings.HasPrefix(ctype, "text/event-stream"):
		// stdout and stderr keep their own order, not their order
		// relative to each other: execd polls two files.
		var events, stdout, stderr []string
		for _, chunk := range strings.Split(string(b), "\n\n") {
			if strings.TrimSpace(chunk) == "" {
				continue
			}
			var e struct {
				Type, Text string
				Error      struct{ Evalue string }
			}
			if err := json.Unmarshal([]byte(chunk), &e); err != nil {
				events = append(events, "unparsed:"+chunk)
				continue
			}
			switch e.Type {
			case "ping":
			case "stdout":
				stdout = append(stdout, e.Text)
			case "stderr":
				stderr = append(stderr, e.Text)
			case "init", "execution_complete":
				events = append(events, e.Type)
			case "error":
				events = append(events, "error:"+e.Error.Evalue)
			default:
				events = append(events, e.Type+":"+e.Text)
			}
		}
		return fmt.Sprintf("events %q stdout %q stderr %q", events, stdout, stderr)
	case strings.HasPrefix(ctype, "application/json"):
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			return "unparsed JSON: " + string(b)
		}
		out, _ := json.Marshal(dropVolatile(v))
		return string(out)
	}
	return string(b)
}

func dropVolatile(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if x["type"] == "directory" {
			delete(x, "size") // the file system's (tmpfs here), not the wire's
		}
		for k, m := range x {
			if volatile[k] {
				delete(x, k)
			} else {
				x[k] = dropVolatile(m)
			}
		}
	case []any:
		for i := range x {
			x[i] = dropVolatile(x[i])
		}
		sort.SliceStable(x, func(i, j int) bool { return fmt.Sprint(x[i]) < fmt.Sprint(x[j]) })
	}
	return v
}

func jsonBody(s string) func() (io.Reader, string) {
	return func() (io.Reader, string) { return strings.NewReader(s), "application/json" }
}

// uploadBody is execd's upload: a "metadata" and a "file" part, both file
// parts (wire-facts §X1.5).
func uploadBody(path, content string) func() (io.Reader, string) {
	return func() (io.Reader, string) {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		for _, p := range []struct{ name, filename, data string }{
			{"metadata", "metadata", `{"path":"` + path + `","mode":644}`},
			{"file", filepath.Base(path), content},
		} {
			h := textproto.MIMEHeader{}
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q; filename=%q`, p.name, p.filename))
			h.Set("Content-Type", "application/octet-stream")
			pw, _ := mw.CreatePart(h)
			_, _ = pw.Write([]byte(p.data))
		}
		_ = mw.Close()
		return &buf, mw.FormDataContentType()
	}
}

// plainMetadataUpload is an upload whose metadata is a plain form field,
// which execd refuses (wire-facts §X1.5).
func plainMetadataUpload(path string) func() (io.Reader, string) {
	return func() (io.Reader, string) {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		_ = mw.WriteField("metadata", `{"path":"`+path+`"}`)
		fw, _ := mw.CreateFormFile("file", filepath.Base(path))
		_, _ = fw.Write([]byte("x"))
		_ = mw.Close()
		return &buf, mw.FormDataContentType()
	}
}
