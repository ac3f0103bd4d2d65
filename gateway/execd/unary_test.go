package execd

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/gateway/upstream"
)

// countingTransport records the requests it carries ("METHOD /execd-path").
type countingTransport struct {
	rt    http.RoundTripper
	mu    sync.Mutex
	paths []string
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.paths = append(c.paths, r.Method+" "+r.URL.Path[strings.LastIndex(r.URL.Path, "/44772")+len("/44772"):])
	c.mu.Unlock()
	return c.rt.RoundTrip(r)
}

func (c *countingTransport) got() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.paths
}

// TestUnaryCallsUseUnary: with Client.Unary set (the data plane's own
// HTTP/1.1 client), the bodyless calls read whole go through it and the
// others (uploads, commands, downloads) through Transport, and both
// answers decode the same.
func TestUnaryCallsUseUnary(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/directories/list"):
			_, _ = io.WriteString(w, `[{"path":"/home/user/a.txt","type":"file","size":3,"modified_at":"2026-12-01T06:31:43Z","created_at":"2026-12-01T06:31:43Z","owner":"root","group":"root","mode":644}]`)
		case strings.HasSuffix(r.URL.Path, "/files/info"):
			_, _ = io.WriteString(w, `{"/home/user/a.txt":{"path":"/home/user/a.txt","size":3,"mode":600}}`)
		case strings.HasSuffix(r.URL.Path, "/files/download"):
			_, _ = io.WriteString(w, "abc")
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	defer srv.Close()
	plain := &countingTransport{rt: http.DefaultTransport}
	u, err := upstream.New(upstream.Config{Fallback: plain})
	if err != nil {
		t.Fatal(err)
	}
	defer u.CloseIdleConnections()
	unary := &countingTransport{rt: u}
	c := &Client{Transport: plain, Unary: unary}
	fe, _ := url.Parse(srv.URL)
	tg := Target{FixedEntry: fe, SandboxID: "sbx1"}
	ctx := context.Background()

	list, err := c.ListDirectory(ctx, tg, "/home/user", 1)
	if err != nil || len(list) != 1 || list[0].Path != "/home/user/a.txt" || list[0].Size != 3 {
		t.Fatalf("ListDirectory = %+v, %v", list, err)
	}
	fi, err := c.Stat(ctx, tg, "/home/user/a.txt")
	if err != nil || fi.Mode != 600 {
		t.Fatalf("Stat = %+v, %v", fi, err)
	}
	if err := c.DeleteFile(ctx, tg, "/home/user/a.txt"); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx, tg); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Download(ctx, tg, "/home/user/a.txt", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if err := c.Upload(ctx, tg, "multipart/form-data; boundary=x", strings.NewReader("--x--\r\n"), 7); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(unary.got(), ","), "GET /directories/list,GET /files/info,DELETE /files,GET /ping"; got != want {
		t.Errorf("through Unary: %s, want %s", got, want)
	}
	if got, want := strings.Join(plain.got(), ","), "GET /files/download,POST /files/upload"; got != want {
		t.Errorf("through Transport: %s, want %s", got, want)
	}
}
