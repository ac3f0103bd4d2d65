package e2bdataplane

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"

	"github.com/sandgate/sandgate/gateway/upstream"
)

// idleWrapped serves h behind a caddyhttp.IdleTimeoutWriter installed the
// way Caddy's server installs it (write idle timeout idle), with the
// writer in the request's context.
func idleWrapped(idle time.Duration, h func(w http.ResponseWriter, r *http.Request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		iw := &caddyhttp.IdleTimeoutWriter{
			ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: w},
			Ctrl:                  http.NewResponseController(w),
			Deadline:              caddyhttp.IdleDeadline{Start: time.Now(), Timeout: idle},
			Logger:                zap.NewNop(),
		}
		defer iw.HandlerDone()
		h(iw, r.WithContext(caddyhttp.ContextWithIdleTimeouts(r.Context(), nil, iw)))
	})
}

// relayFrom fetches u with tr and relays the body to w through
// downloadWriter, returning WriteTo's result.
func relayFrom(tr *upstream.Transport, w http.ResponseWriter, r *http.Request, u string) (int64, error) {
	req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, u, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	w.WriteHeader(http.StatusOK)
	return resp.Body.(io.WriterTo).WriteTo(downloadWriter(w, r))
}

// sourceProbe sits under the idle writer and counts the ReadFrom sources
// it passes on: an *io.LimitedReader over a *net.TCPConn (what net/http
// splices) or any other.
type sourceProbe struct{ spliceable, other atomic.Int32 }

type probeWriter struct {
	http.ResponseWriter
	p *sourceProbe
}

func (w probeWriter) ReadFrom(r io.Reader) (int64, error) {
	if lr, ok := r.(*io.LimitedReader); ok {
		if _, ok := lr.R.(*net.TCPConn); ok {
			w.p.spliceable.Add(1)
			return w.ResponseWriter.(io.ReaderFrom).ReadFrom(r)
		}
	}
	w.p.other.Add(1)
	return w.ResponseWriter.(io.ReaderFrom).ReadFrom(r)
}

func (w probeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// wrap puts the probe beneath h's writers.
func (p *sourceProbe) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(probeWriter{w, p}, r)
	})
}

func newOwnClient(t *testing.T) *upstream.Transport {
	t.Helper()
	tr, err := upstream.New(upstream.Config{Fallback: http.DefaultTransport})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

func TestDownloadWriterChoice(t *testing.T) {
	rec := httptest.NewRecorder()
	iw := &caddyhttp.IdleTimeoutWriter{ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: rec},
		Deadline: caddyhttp.IdleDeadline{Timeout: time.Minute}}
	r := httptest.NewRequest(http.MethodGet, "/files", nil)
	withIdle := r.WithContext(caddyhttp.ContextWithIdleTimeouts(r.Context(), nil, iw))
	if _, ok := downloadWriter(iw, withIdle).(*idleSplicer); !ok {
		t.Error("the idle writer itself: no splicer beneath it")
	}
	between := &caddyhttp.ResponseWriterWrapper{ResponseWriter: iw} // a recorder's place
	if _, ok := downloadWriter(between, withIdle).(writeOnly); !ok {
		t.Error("a wrapper above the idle writer: not copied through Write")
	}
	iw.Deadline.MinRate = 1000
	if _, ok := downloadWriter(iw, withIdle).(writeOnly); !ok {
		t.Error("a minimum rate: not copied through Write")
	}
	if got := downloadWriter(rec, r); got != io.Writer(rec) {
		t.Errorf("no idle writer: got %T, want the writer itself", got)
	}
	h2 := withIdle.Clone(withIdle.Context())
	h2.ProtoMajor = 2
	iw.Deadline.MinRate = 0
	if _, ok := downloadWriter(iw, h2).(writeOnly); !ok {
		t.Error("HTTP/2: not copied through Write")
	}
}

// TestIdleSplicerRelays relays a 16 MiB body from a net/http execd
// stand-in through an IdleTimeoutWriter's splicer and checks the bytes
// and that the upstream connection is reused.
func TestIdleSplicerRelays(t *testing.T) {
	body := bytes.Repeat([]byte("sandgate splice "), 1<<20) // 16 MiB
	var accepted atomic.Int32
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			accepted.Add(1)
		}
	}
	up.Start()
	t.Cleanup(up.Close)
	tr := newOwnClient(t)
	probe := &sourceProbe{}
	front := httptest.NewServer(probe.wrap(idleWrapped(time.Minute, func(w http.ResponseWriter, r *http.Request) {
		if n, err := relayFrom(tr, w, r, up.URL); err != nil || n != int64(len(body)) {
			t.Errorf("relayed %d, %v", n, err)
		}
	})))
	t.Cleanup(front.Close)
	for i := range 2 {
		resp, err := http.Get(front.URL)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("request %d: %v, %d bytes, equal %v", i, err, len(got), bytes.Equal(got, body))
		}
	}
	if n := accepted.Load(); n != 1 {
		t.Fatalf("%d upstream connections for 2 whole bodies, want 1", n)
	}
	if n := probe.spliceable.Load(); n < 2 || probe.other.Load() != 0 {
		t.Fatalf("beneath the idle writer: %d sources net/http splices, %d others", n, probe.other.Load())
	}
}

// TestIdleSplicerClientStopsReading: a client that reads the head and
// then nothing ends the relay by the idle timeout, as Caddy's own
// writer would.
func TestIdleSplicerClientStopsReading(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 256<<20) // far more than the sockets' buffers
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	}))
	t.Cleanup(up.Close)
	tr := newOwnClient(t)
	done := make(chan error, 1)
	front := httptest.NewServer(idleWrapped(200*time.Millisecond, func(w http.ResponseWriter, r *http.Request) {
		_, err := relayFrom(tr, w, r, up.URL)
		done <- err
	}))
	t.Cleanup(front.Close)
	c, err := net.Dial("tcp", front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	select {
	case err := <-done:
		if !isTimeout(err) {
			t.Fatalf("the relay to a client that stopped reading ended with %v, want a write timeout", err)
		}
	case <-ctx.Done():
		t.Fatal("the relay to a client that stopped reading never ended")
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestClientsChoice: downloads take the own client whenever the transport
// speaks HTTP/1.1 without h2c or HTTP/3, whatever unary_client says; the
// unary calls take it only with unary_client builtin.
func TestClientsChoice(t *testing.T) {
	rt := func(versions ...string) *reverseproxy.HTTPTransport {
		return &reverseproxy.HTTPTransport{Versions: versions, Transport: &http.Transport{}}
	}
	for _, tc := range []struct {
		unary    string
		versions []string
		ownUnary bool
		ownDown  bool
		fails    bool
	}{
		{"", []string{"1.1", "2"}, false, true, false},
		{"transport", []string{"1.1", "2"}, false, true, false},
		{"builtin", []string{"1.1", "2"}, true, true, false},
		{"", []string{"1.1", "h2c"}, false, false, false},
		{"builtin", []string{"1.1", "h2c"}, true, false, false},
		{"", []string{"h2c"}, false, false, false},
		{"builtin", []string{"h2c"}, false, false, true},
		{"", []string{"1.1", "3"}, false, false, false},
		{"nope", []string{"1.1"}, false, false, true},
	} {
		h := &Handler{UnaryClient: tc.unary}
		tr := rt(tc.versions...)
		unary, stream, err := h.clients(tr)
		if tc.fails {
			if err == nil {
				t.Errorf("%q %v: no error", tc.unary, tc.versions)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q %v: %v", tc.unary, tc.versions, err)
		}
		_, ownU := unary.(*upstream.Transport)
		_, ownD := stream.(*upstream.Transport)
		if ownU != tc.ownUnary || ownD != tc.ownDown {
			t.Errorf("%q %v: own client for unary %v, downloads %v; want %v, %v", tc.unary, tc.versions, ownU, ownD, tc.ownUnary, tc.ownDown)
		}
		if (ownU || ownD) != (h.unary != nil) {
			t.Errorf("%q %v: the own client is not kept for Cleanup", tc.unary, tc.versions)
		}
	}
}
