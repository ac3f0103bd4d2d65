package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestRawConnAsksOverOneConnection: the authz goal's raw client reads a
// net/http server's answers (status, Content-Length body) one after the
// other on one kept-alive connection, and dials again after the server
// closed it.
func TestRawConnAsksOverOneConnection(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("sandbox") == "close" {
			w.Header().Set("Connection", "close")
		}
		if r.Header.Get("Authorization") != "Bearer "+internalToken {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"allowed":true,"endAt":"2026-12-06T04:00:00Z"}` + "\n"))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	w := &world{own: []string{"sb-a", "close"}, rest: []string{"sb-b"}}
	own, rest := w.authzRequests()
	c := &rawConn{addr: strings.TrimPrefix(srv.URL, "http://")}
	for i, req := range [][]byte{own[0], rest[0], own[0]} {
		if code, err := c.ask(req); err != nil || code != http.StatusOK {
			t.Fatalf("question %d: %d %v", i, code, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for three questions, want 1", n)
	}
	if code, err := c.ask(own[1]); err != nil || code != http.StatusOK {
		t.Fatalf("question answered with Connection: close: %d %v", code, err)
	}
	// The server closed that connection: the next question fails on it
	// or dials again; either way the one after is answered on a new one.
	if _, err := c.ask(own[0]); err != nil {
		if code, err := c.ask(own[0]); err != nil || code != http.StatusOK {
			t.Fatalf("after the close: %d %v", code, err)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
	bad := []byte("GET /x HTTP/1.1\r\nHost: corectl\r\n\r\n")
	if code, err := c.ask(bad); err != nil || code != http.StatusUnauthorized {
		t.Fatalf("unauthenticated question: %d %v", code, err)
	}
}

// TestAskAllOpenLoop: askAll asks every question no earlier than its due
// time and records its timeline.
func TestAskAllOpenLoop(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("{}\n"))
	}))
	defer srv.Close()
	start := time.Now().Add(20 * time.Millisecond)
	qs := make([]question, 50)
	reqs := make([][]byte, len(qs))
	for i := range qs {
		qs[i].due = start.Add(time.Duration(i) * time.Millisecond).UnixNano()
		reqs[i] = []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	askAll(strings.TrimPrefix(srv.URL, "http://"), qs, reqs, 4)
	for i, q := range qs {
		if !q.ok || q.sent < q.due || q.done < q.sent {
			t.Fatalf("question %d: %+v", i, q)
		}
	}
}
