package machineclient

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/node/machine"
)

const (
	nodeID = "7c0e5f0a-4c1e-4e55-9a7e-2f1f6d1b9a01"
	cred   = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	digest = "1111111111111111111111111111111111111111111111111111111111111111"
)

func client(t *testing.T, h http.HandlerFunc) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL + "/prefix")
	return New(u, nil)
}

var auth = Auth{NodeID: nodeID, Credential: cred}

func configBody(extra string) string {
	return `{"node_id":"` + nodeID + `","pool":"default","enrolled":{"deployment_generation":1,"specification_digest":"` + digest +
		`"},"deployment":{"generation":1,"specification_digest":"` + digest + `","serving_generation":null},` +
		`"runtimes":[{"generation":1,"specification_digest":"` + digest + `","source":"rel","manifest_url":"/api/v1/sandbox-node/releases/rel/manifest.json"}]` + extra + `}`
}

func TestConfigSendsTheCredentialAndDecodesStrictly(t *testing.T) {
	var got *http.Request
	c := client(t, func(w http.ResponseWriter, r *http.Request) {
		got = r
		io.WriteString(w, configBody(""))
	})
	cfg, err := c.Config(context.Background(), auth, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got.URL.Path != "/prefix"+machine.ConfigPath || got.URL.Query().Get("node_id") != nodeID || got.URL.Query().Get("generation") != "1" ||
		got.Header.Get("Authorization") != "Bearer "+cred {
		t.Fatalf("request %s %v %v", got.URL, got.URL.Query(), got.Header)
	}
	if rt, err := FindRuntime(cfg.Runtimes, 1, digest); err != nil || rt.Source != "rel" {
		t.Fatalf("FindRuntime = %+v, %v", rt, err)
	}
	if _, err := FindRuntime(cfg.Runtimes, 1, strings.Repeat("2", 64)); !errors.Is(err, ErrTransfer) {
		t.Fatalf("another digest: %v", err)
	}
	if _, err := FindRuntime(cfg.Runtimes, 2, digest); !errors.Is(err, ErrGenerationUnknown) {
		t.Fatalf("another generation: %v", err)
	}
}

func TestConfigRefusals(t *testing.T) {
	cases := []struct {
		name   string
		status int
		body   string
		err    error
	}{
		{"401", 401, `{"error":"unauthorized"}`, ErrRefused},
		{"generation unknown", 404, `{"error":"generation_unknown"}`, ErrGenerationUnknown},
		{"503", 503, `{"error":"deployment_unavailable"}`, ErrTransfer},
		{"unknown member", 200, configBody(`,"extra":1`), ErrTransfer},
		{"another node", 200, strings.Replace(configBody(""), nodeID, "0b6f2c9e-0d55-4a53-8f0e-5d1c2b3a4f60", 1), ErrTransfer},
		{"over 64 KiB", 200, configBody(`,"x":"` + strings.Repeat("a", machine.MaxBody) + `"`), ErrTransfer},
		{"redirect", 302, "", ErrTransfer},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := client(t, func(w http.ResponseWriter, r *http.Request) {
				if tc.status == 302 {
					w.Header().Set("Location", "http://example.invalid/")
				}
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			})
			_, err := c.Config(context.Background(), auth, 0)
			if !errors.Is(err, tc.err) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if strings.Contains(err.Error(), cred) {
				t.Fatal("the error shows the credential")
			}
		})
	}
}

func TestPreviewDecodesTheConfigurationWithoutANode(t *testing.T) {
	body := strings.Replace(configBody(""), `"node_id":"`+nodeID+`",`, "", 1)
	c := client(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/prefix"+machine.EnrolPath || r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(401)
			return
		}
		io.WriteString(w, body)
	})
	cfg, err := c.Preview(context.Background(), "tok")
	if err != nil || cfg.Enrolled.DeploymentGeneration != 1 || len(cfg.Runtimes) != 1 {
		t.Fatalf("Preview = %+v, %v", cfg, err)
	}
	if _, err := c.Preview(context.Background(), "other"); !errors.Is(err, ErrRefused) {
		t.Fatalf("a refused token: %v", err)
	}
}

// rangeServer serves content with http.ServeContent (as Core does) and
// records the Range headers it saw.
func rangeServer(t *testing.T, content []byte, ranges *[]string) *Client {
	return client(t, func(w http.ResponseWriter, r *http.Request) {
		*ranges = append(*ranges, r.Header.Get("Range"))
		if r.Header.Get(machine.NodeIDHeader) != nodeID {
			w.WriteHeader(401)
			return
		}
		http.ServeContent(w, r, "a", time.Time{}, bytes.NewReader(content))
	})
}

func TestDownloadResumesOnlyTheMissingBytes(t *testing.T) {
	content := bytes.Repeat([]byte("0123456789"), 1000)
	var ranges []string
	c := rangeServer(t, content, &ranges)
	path := filepath.Join(t.TempDir(), "a.partial")
	os.WriteFile(path, content[:4321], 0o600)
	f, _ := os.OpenFile(path, os.O_RDWR, 0)
	defer f.Close()
	if err := c.Download(context.Background(), "/x", auth, f, int64(len(content)), ""); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, content) {
		t.Fatal("the resumed file differs")
	}
	if len(ranges) != 1 || ranges[0] != "bytes=4321-" {
		t.Fatalf("ranges asked %q, want only the missing bytes", ranges)
	}
	// Complete already: nothing is asked.
	if err := c.Download(context.Background(), "/x", auth, f, int64(len(content)), ""); err != nil || len(ranges) != 1 {
		t.Fatalf("a complete file was fetched again: %v, %q", err, ranges)
	}
}

func TestDownloadRefusesWhatIsNotTheDeclaredFile(t *testing.T) {
	content := []byte("exactly these bytes")
	for _, tc := range []struct {
		name     string
		size     int64
		existing []byte
		err      error
	}{
		{"longer than declared", int64(len(content)) - 3, nil, ErrTransfer},
		{"shorter than declared", int64(len(content)) + 3, nil, ErrTransfer},
		{"a partial file longer than declared starts again", int64(len(content)), bytes.Repeat([]byte("x"), 100), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ranges []string
			c := rangeServer(t, content, &ranges)
			path := filepath.Join(t.TempDir(), "a.partial")
			os.WriteFile(path, tc.existing, 0o600)
			f, _ := os.OpenFile(path, os.O_RDWR, 0)
			defer f.Close()
			err := c.Download(context.Background(), "/x", auth, f, tc.size, "")
			if !errors.Is(err, tc.err) && !(tc.err == nil && err == nil) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if fi, _ := f.Stat(); fi.Size() > tc.size {
				t.Fatalf("%d bytes kept, more than the %d declared", fi.Size(), tc.size)
			}
		})
	}
}

func TestDownloadRefusesARangeThatDoesNotContinue(t *testing.T) {
	c := client(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Range", "bytes 0-9/10")
		w.WriteHeader(http.StatusPartialContent)
		io.WriteString(w, "0123456789")
	})
	path := filepath.Join(t.TempDir(), "a.partial")
	os.WriteFile(path, []byte("01234"), 0o600)
	f, _ := os.OpenFile(path, os.O_RDWR, 0)
	defer f.Close()
	if err := c.Download(context.Background(), "/x", auth, f, 10, ""); !errors.Is(err, ErrTransfer) {
		t.Fatalf("error %v, want ErrTransfer", err)
	}
}

func TestSizeAsksForOneByte(t *testing.T) {
	var ranges []string
	c := rangeServer(t, bytes.Repeat([]byte("a"), 5000), &ranges)
	n, err := c.Size(context.Background(), "/x", auth)
	if err != nil || n != 5000 || ranges[0] != "bytes=0-0" {
		t.Fatalf("Size = %d, %v (ranges %q)", n, err, ranges)
	}
}

func TestGetIsBounded(t *testing.T) {
	c := client(t, func(w http.ResponseWriter, r *http.Request) { w.Write(make([]byte, 2000)) })
	if _, err := c.Get(context.Background(), "/x", auth, 1999); !errors.Is(err, ErrTransfer) {
		t.Fatalf("over the limit: %v", err)
	}
	if b, err := c.Get(context.Background(), "/x", auth, 2000); err != nil || len(b) != 2000 {
		t.Fatalf("at the limit: %d, %v", len(b), err)
	}
}
