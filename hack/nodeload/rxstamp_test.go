package main

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// TestStampConnStampsEachRead: over a real loopback TCP connection, a
// read through stampConn returns the bytes written and a receive stamp
// between the write's start and the read's end; a later write's read
// moves the stamp on; the peer's close is io.EOF; a read deadline still
// ends a read that waits.
func TestStampConnStampsEachRead(t *testing.T) {
	c, peer := loopbackPair(t)
	sc, err := newStampConn(c)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	if sc.Stamp() != 0 {
		t.Fatalf("stamp %d before any read; want 0", sc.Stamp())
	}
	buf := make([]byte, 64)
	// The kernel turns its receive stamps on for every socket shortly
	// after the first socket asked for them (a deferred static-key
	// switch): until then a read has no stamp. Ping until one has.
	for deadline := time.Now().Add(5 * time.Second); sc.Stamp() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no receive stamp within 5 s of SO_TIMESTAMPNS")
		}
		if _, err := peer.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := sc.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	var prev int64
	for _, msg := range []string{"first", "second"} {
		before := time.Now().UnixNano()
		if _, err := peer.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		n, err := io.ReadAtLeast(sc, buf, len(msg))
		after := time.Now().UnixNano()
		if err != nil || !bytes.Equal(buf[:n], []byte(msg)) {
			t.Fatalf("read %q, %v; want %q", buf[:n], err, msg)
		}
		st := sc.Stamp()
		if st < before || st > after || st <= prev {
			t.Fatalf("stamp %d of %q: want within [%d, %d] and after the previous %d", st, msg, before, after, prev)
		}
		prev = st
	}
	if err := sc.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Read(buf); err == nil {
		t.Fatal("a read with nothing to read returned before its deadline without an error")
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("read past its deadline: %v; want a timeout", err)
	}
	_ = sc.SetReadDeadline(time.Time{})
	_ = peer.Close()
	if _, err := sc.Read(buf); err != io.EOF {
		t.Fatalf("read after the peer closed: %v; want io.EOF", err)
	}
}

// TestNewStampConnRefusesNonTCP: a connection that is not TCP is an
// error, not a connection without stamps.
func TestNewStampConnRefusesNonTCP(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, err := newStampConn(a); err == nil {
		t.Fatal("newStampConn took a net.Pipe")
	}
}

// loopbackPair returns both ends of a new loopback TCP connection: the
// dialled one and the accepted one, both closed when the test ends.
func loopbackPair(t *testing.T) (dialled, accepted net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(acc)
			return
		}
		acc <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	peer, ok := <-acc
	if !ok {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { peer.Close() })
	return c, peer
}
