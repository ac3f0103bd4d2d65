package integration

// Benchmarks against the built binaries (make bench; figures in
// docs/benchmarks.md): the gateway next to a plain Caddy reverse_proxy and
// next to direct requests to the fixed entry, with the same fixed-entry +
// execd stand-ins behind both.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/integration/harness"
)

// benchClient keeps enough idle connections for the parallel clients, so
// the figures measure requests rather than TCP handshakes.
func benchClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512, IdleConnTimeout: time.Minute}}
}

// startReverseProxy runs a second bin/caddy with a plain reverse_proxy to
// upstream and returns its base URL; Cleanup stops it.
func startReverseProxy(b *testing.B, root, upstream string) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := b.TempDir()
	cf := fmt.Sprintf("{\n\tadmin off\n\tauto_https off\n\tpersist_config off\n}\n\nhttp://%s {\n\treverse_proxy %s\n}\n", addr, upstream)
	cfPath := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cfPath, []byte(cf), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(harness.CaddyBinary(root), "run", "--config", cfPath, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	logs := newLogBuffer()
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	b.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return "http://" + addr
		}
		select {
		case err := <-exited:
			b.Fatalf("the reverse proxy exited: %v\n%s", err, logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.Fatalf("the reverse proxy did not listen within 30s\n%s", logs.String())
		}
	}
}

// latencies collects request durations from parallel goroutines.
type latencies struct {
	mu  sync.Mutex
	all []time.Duration
}

func (l *latencies) add(d []time.Duration) {
	l.mu.Lock()
	l.all = append(l.all, d...)
	l.mu.Unlock()
}

func (l *latencies) quantile(q float64) time.Duration {
	if len(l.all) == 0 {
		return 0
	}
	slices.Sort(l.all)
	i := int(q * float64(len(l.all)-1))
	return l.all[i]
}

// runRequests runs newReq in parallel clients and reports req/s and the
// p50/p99 latency computed from every recorded duration.
func runRequests(b *testing.B, c *http.Client, newReq func() *http.Request) {
	b.Helper()
	var lat latencies
	b.SetParallelism(4) // 4 × GOMAXPROCS clients
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		local := make([]time.Duration, 0, 4096)
		for pb.Next() {
			t0 := time.Now()
			resp, err := c.Do(newReq())
			if err != nil {
				b.Error(err)
				return
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			local = append(local, time.Since(t0))
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Errorf("status %d, body error %v", resp.StatusCode, err)
				return
			}
		}
		lat.add(local)
	})
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	b.ReportMetric(float64(lat.quantile(0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat.quantile(0.99).Microseconds())/1000, "p99-ms")
}

// BenchmarkListDir: ListDir through the gateway (Connect unary → token,
// credential, cluster → GET /directories/list) against a plain Caddy
// reverse_proxy sending the equivalent execd call to the same fixed entry.
func BenchmarkListDir(b *testing.B) {
	e := startEnv(b)
	const dir = "/home/user/bench"
	e.mkdir(dir)
	for i := range 16 {
		if err := os.WriteFile(e.host(fmt.Sprintf("%s/file-%02d.txt", dir, i)), []byte("benchmark\n"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	tok := e.mint(sbxOK, harness.Grant{CredentialID: credOK})
	proxy := startReverseProxy(b, e.root, e.FixedEntry)
	c := benchClient()
	body := `{"path":"` + dir + `","depth":1}`

	b.Run("gateway", func(b *testing.B) {
		e.Ingress.ResetRequests()
		runRequests(b, c, func() *http.Request {
			req, _ := http.NewRequest(http.MethodPost, e.Gateway+"/filesystem.Filesystem/ListDir", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Connect-Protocol-Version", "1")
			req.Header.Set("E2b-Sandbox-Id", sbxOK)
			req.Header.Set("E2b-Sandbox-Port", envdPort)
			req.Header.Set("X-Access-Token", tok)
			return req
		})
	})
	b.Run("caddy_reverse_proxy", func(b *testing.B) {
		e.Ingress.ResetRequests()
		target := proxy + "/" + sbxOK + "/44772/directories/list?path=" + url.QueryEscape(dir) + "&depth=1"
		runRequests(b, c, func() *http.Request {
			req, _ := http.NewRequest(http.MethodGet, target, nil)
			return req
		})
	})
	e.Ingress.ResetRequests()
}

const gib = 1 << 30

// patternBlock is the repeating content of pattern (period 64 KiB).
var patternBlock = func() []byte {
	b := make([]byte, 64<<10)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}()

// pattern is an endless reader of patternBlock, cheap enough not to steal
// CPU from the peers being measured.
type pattern struct{ off int }

func (p *pattern) Read(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		c := copy(b[n:], patternBlock[p.off:])
		n += c
		p.off = (p.off + c) % len(patternBlock)
	}
	return n, nil
}

// peakRSS returns the gateway's VmHWM in MB.
func peakRSS(b *testing.B, pid int) float64 {
	b.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb / 1024
		}
	}
	b.Fatal("no VmHWM in /proc/<pid>/status")
	return 0
}

// resetPeakRSS resets VmHWM to the current RSS (Linux clear_refs "5"), so
// each sub-benchmark reports its own peak. It reports whether that worked.
func resetPeakRSS(pid int) bool {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0) == nil
}

// BenchmarkTransfer1GiB: a 1 GiB download and upload through the gateway
// against the same transfer sent directly to the fixed entry (execd's own
// API), reporting MB/s (b.SetBytes) and the gateway's peak RSS. Bytes are
// streamed; the test never holds the file in memory.
func BenchmarkTransfer1GiB(b *testing.B) {
	e := startEnv(b)
	const src, dst = "/home/user/bench-1g.bin", "/home/user/bench-upload.bin"
	f, err := os.Create(e.host(src))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.Remove(e.host(src)); _ = os.Remove(e.host(dst)) })
	if _, err := io.Copy(f, io.LimitReader(&pattern{}, gib)); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	tok := e.mint(sbxOK, harness.Grant{CredentialID: credOK})
	c := benchClient()
	direct := e.FixedEntry + "/" + sbxOK + "/44772"
	pid := e.PID()

	gatewayHeaders := func(req *http.Request) {
		req.Header.Set("E2b-Sandbox-Id", sbxOK)
		req.Header.Set("E2b-Sandbox-Port", envdPort)
		req.Header.Set("X-Access-Token", tok)
	}
	// transfer runs b.N transfers; viaGateway adds the gateway's peak RSS.
	transfer := func(b *testing.B, viaGateway bool, newReq func() (*http.Request, error), wantBody int64, check func()) {
		b.Helper()
		e.Ingress.ResetRequests()
		b.SetBytes(gib)
		rssReset := resetPeakRSS(pid)
		b.ResetTimer()
		for range b.N {
			req, err := newReq()
			if err != nil {
				b.Fatal(err)
			}
			resp, err := c.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || (wantBody >= 0 && n != wantBody) {
				b.Fatalf("status %d, %d body bytes (want %d), %v", resp.StatusCode, n, wantBody, err)
			}
			if check != nil {
				b.StopTimer()
				check()
				b.StartTimer()
			}
		}
		b.StopTimer()
		if !viaGateway {
			return
		}
		if rssReset {
			b.ReportMetric(peakRSS(b, pid), "gateway-peak-RSS-MB")
		} else {
			b.ReportMetric(peakRSS(b, pid), "gateway-peak-RSS-since-start-MB")
		}
	}
	uploaded := func() {
		fi, err := os.Stat(e.host(dst))
		if err != nil || fi.Size() != gib {
			b.Fatalf("uploaded file: %v size %d", err, sizeOf(fi))
		}
		if err := os.Remove(e.host(dst)); err != nil {
			b.Fatal(err)
		}
	}

	b.Run("download/gateway", func(b *testing.B) {
		transfer(b, true, func() (*http.Request, error) {
			req, err := http.NewRequest(http.MethodGet, e.Gateway+"/files?path="+url.QueryEscape(src), nil)
			if err == nil {
				gatewayHeaders(req)
			}
			return req, err
		}, gib, nil)
	})
	b.Run("download/direct", func(b *testing.B) {
		transfer(b, false, func() (*http.Request, error) {
			return http.NewRequest(http.MethodGet, direct+"/files/download?path="+url.QueryEscape(src), nil)
		}, gib, nil)
	})
	b.Run("upload/gateway", func(b *testing.B) {
		transfer(b, true, func() (*http.Request, error) {
			req, err := http.NewRequest(http.MethodPost, e.Gateway+"/files?path="+url.QueryEscape(dst), io.LimitReader(&pattern{}, gib))
			if err == nil {
				req.ContentLength = gib
				req.Header.Set("Content-Type", "application/octet-stream")
				gatewayHeaders(req)
			}
			return req, err
		}, -1, uploaded)
	})
	b.Run("upload/direct", func(b *testing.B) {
		transfer(b, false, func() (*http.Request, error) {
			pr, pw := io.Pipe()
			mw := multipart.NewWriter(pw)
			go func() {
				err := func() error {
					part, err := mw.CreateFormFile("metadata", "metadata")
					if err != nil {
						return err
					}
					if _, err := fmt.Fprintf(part, `{"path":%q,"mode":644}`, dst); err != nil {
						return err
					}
					if part, err = mw.CreateFormFile("file", filepath.Base(dst)); err != nil {
						return err
					}
					if _, err := io.Copy(part, io.LimitReader(&pattern{}, gib)); err != nil {
						return err
					}
					return mw.Close()
				}()
				_ = pw.CloseWithError(err)
			}()
			req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, direct+"/files/upload", pr)
			if err == nil {
				req.Header.Set("Content-Type", mw.FormDataContentType())
			}
			return req, err
		}, -1, uploaded)
	})
}

func sizeOf(fi os.FileInfo) int64 {
	if fi == nil {
		return -1
	}
	return fi.Size()
}
