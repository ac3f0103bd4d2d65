package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/hack/pacer"
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
// time, with each pacing, and records its timeline in order (free ≤
// sent: a worker is free before it writes).
func TestAskAllOpenLoop(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("{}\n"))
	}))
	defer srv.Close()
	for _, pacing := range []string{pacingWorker, pacingHandoff, pacingSleep} {
		start := time.Now().Add(20 * time.Millisecond)
		qs := make([]question, 50)
		reqs := make([][]byte, len(qs))
		for i := range qs {
			qs[i].due = start.Add(time.Duration(i) * time.Millisecond).UnixNano()
			reqs[i] = []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		}
		askAll(strings.TrimPrefix(srv.URL, "http://"), qs, reqs, 4, pacing)
		for i, q := range qs {
			if !q.ok || q.sent < q.due || q.free == 0 || q.free > q.sent || q.done < q.sent {
				t.Fatalf("%s: question %d: %+v", pacing, i, q)
			}
		}
	}
}

// TestAskAllWaitsForAFreeWorker: with one worker and a server that
// answers only once released, the question due while the worker still
// waits for the first answer is sent after it, and its send delay is
// the wait for a free worker from the first answer's read on: free is
// the first question's done, and pacer.Split puts the time from due to
// free in the wait, the rest in the tool's lateness.
func TestAskAllWaitsForAFreeWorker(t *testing.T) {
	for _, pacing := range []string{pacingWorker, pacingHandoff} {
		release := make(chan struct{})
		var asked atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if asked.Add(1) == 1 {
				<-release
			}
			_, _ = w.Write([]byte("{}\n"))
		}))
		defer srv.Close()
		start := time.Now().Add(10 * time.Millisecond)
		qs := []question{{due: start.UnixNano()}, {due: start.Add(time.Millisecond).UnixNano()}}
		reqs := [][]byte{[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")}
		done := make(chan struct{})
		go func() {
			askAll(strings.TrimPrefix(srv.URL, "http://"), qs, reqs, 1, pacing)
			close(done)
		}()
		// The second question's due time passes while the first waits.
		for time.Now().UnixNano() <= qs[1].due {
			runtime.Gosched()
		}
		close(release)
		<-done
		q := qs[1]
		if !q.ok || q.free < qs[0].done || q.sent < q.free {
			t.Fatalf("%s: second question %+v, first %+v", pacing, q, qs[0])
		}
		late, wait := pacer.Split(q.due, q.free, q.sent)
		if wait != time.Duration(q.free-q.due) || late != time.Duration(q.sent-q.free) || wait <= 0 {
			t.Fatalf("%s: split late %s, wait %s of %+v", pacing, late, wait, q)
		}
	}
}
