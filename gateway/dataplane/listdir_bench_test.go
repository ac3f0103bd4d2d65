package dataplane

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/sandgate/sandgate/gateway/credential"
	"github.com/sandgate/sandgate/gateway/execd"
	"github.com/sandgate/sandgate/gateway/token"
	"github.com/sandgate/sandgate/gateway/upstream"
)

// cannedUpstream is a loopback HTTP/1.1 server that answers every request
// with the same bytes after reading its head, allocating next to nothing
// per request, so a benchmark's allocations are the gateway's.
func cannedUpstream(b *testing.B, body string) *url.URL {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ln.Close() })
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					for {
						line, err := br.ReadSlice('\n')
						if err != nil {
							return
						}
						if len(bytes.TrimRight(line, "\r\n")) == 0 {
							break
						}
					}
					if _, err := c.Write(resp); err != nil {
						return
					}
				}
			}()
		}
	}()
	return &url.URL{Scheme: "http", Host: ln.Addr().String()}
}

// BenchmarkListDir serves one ListDir through the Handler (called
// directly, no inbound server) to a canned upstream answering a 16-entry
// execd listing: the data plane's own cost per unary call, with -benchmem
// its allocations (docs/benchmarks.md "Issue 33"). client=net_http sends
// it over a net/http transport, client=builtin over the data plane's own
// HTTP/1.1 client (gateway/upstream, unary_client builtin).
func BenchmarkListDir(b *testing.B) {
	for _, client := range []string{"net_http", "builtin"} {
		b.Run("client="+client, func(b *testing.B) { benchmarkListDir(b, client == "builtin") })
	}
}

func benchmarkListDir(b *testing.B, builtin bool) {
	var entries []string
	for i := range 16 {
		entries = append(entries, fmt.Sprintf(`{"path":"/home/user/bench/file-%02d.txt","type":"file","size":10,"modified_at":"2026-12-01T06:31:43.123456789Z","created_at":"2026-12-01T06:31:43.123456789Z","owner":"root","group":"root","mode":644}`, i))
	}
	fe := cannedUpstream(b, "["+strings.Join(entries, ",")+"]")
	keyFile := filepath.Join(b.TempDir(), "k.key")
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(secret)), 0o600); err != nil {
		b.Fatal(err)
	}
	key, err := token.LoadSigningKey("k1", "HS256", keyFile)
	if err != nil {
		b.Fatal(err)
	}
	verifier, err := token.NewVerifier([]token.Key{key.Public()}, 5*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	tok, err := key.Mint(token.Target{CredentialID: "cred-a", SandboxID: testSandbox, Port: EnvdPort}, time.Hour, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 8}
	b.Cleanup(tr.CloseIdleConnections)
	client := &execd.Client{Transport: tr}
	if builtin {
		u, err := upstream.New(upstream.FromHTTPTransport(tr, tr))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(u.CloseIdleConnections)
		client.Unary = u
	}
	h, err := New(Config{}, Deps{
		Tokens: verifier,
		Credentials: &fakeCredentials{creds: map[string]credential.Credential{
			"cred-a": {ID: "cred-a", Enabled: true, ProjectNamespace: "ns", ClusterID: "cluster-a"}}},
		Clusters: fakeClusters{"cluster-a": {ID: "cluster-a", FixedEntry: fe}},
		Execd:    client,
		Logger:   zap.NewNop(),
	})
	if err != nil {
		b.Fatal(err)
	}
	msg := []byte(`{"path":"/home/user/bench","depth":1}`)
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/filesystem.Filesystem/ListDir", bytes.NewReader(msg))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Connect-Protocol-Version", "1")
		req.Header.Set(HeaderSandboxID, testSandbox)
		req.Header.Set(HeaderSandboxPort, "49983")
		req.Header.Set(HeaderAccessToken, tok)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}
