package main

import (
	"bytes"
	"runtime"
	"runtime/trace"
	"strings"
	"testing"
	"time"
)

// TestReadWakeupsOfANetworkRead: a goroutine that waits on a loopback
// read, gets the bytes and logs an operation is found in this process's
// own runtime execution trace, with its unblocking, its run and its log
// in order, on the wall clock, between the write and the log, and with
// the wait's reason the network.
func TestReadWakeupsOfANetworkRead(t *testing.T) {
	c, peer := loopbackPair(t)

	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Fatal(err)
	}
	read := make(chan int64, 1)
	waiting := make(chan struct{})
	go func() {
		close(waiting)
		b := make([]byte, 8)
		_, err := c.Read(b)
		if err != nil {
			read <- 0
			return
		}
		logOp(func() string { return "op 7" })
		read <- time.Now().UnixNano()
	}()
	<-waiting
	// The reader parks in the poller once it finds nothing to read; the
	// trace records that wait whatever the order, as long as the bytes
	// come after the park. Poll the goroutine's state through the
	// runtime's stacks until it waits on the network (with a deadline).
	for deadline := time.Now().Add(5 * time.Second); !readerParked(); {
		if time.Now().After(deadline) {
			t.Fatal("the reader did not park on the network within 5 s")
		}
		time.Sleep(time.Millisecond) // polling the runtime's goroutine states
	}
	wrote := time.Now().UnixNano()
	if _, err := peer.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	logged := <-read
	trace.Stop()
	if logged == 0 {
		t.Fatal("the read failed")
	}
	got, act, err := readWakeups(&buf)
	if err != nil {
		t.Fatal(err)
	}
	w, ok := got["op 7"]
	if !ok {
		t.Fatalf("no wake-up for the logged operation; got %v", got)
	}
	if !(wrote <= w.unblocked && w.unblocked <= w.running && w.running <= w.logged && w.logged <= logged) {
		t.Fatalf("wake-up %+v out of order against the write at %d and the log before %d", w, wrote, logged)
	}
	if len(act.busy) == 0 || within(act.busy, w.running, w.logged) == 0 {
		t.Errorf("the P's busy intervals %v do not cover the reader's run [%d, %d]", len(act.busy), w.running, w.logged)
	}
	if !strings.Contains(strings.ToLower(w.reason), "network") {
		t.Errorf("wait reason %q; want the network", w.reason)
	}
}

// readerParked reports whether a goroutine of this process is parked in
// the network poller on a read ("[IO wait]").
func readerParked() bool {
	b := make([]byte, 1<<20)
	n := runtime.Stack(b, true)
	return bytes.Contains(b[:n], []byte("[IO wait]"))
}

// TestWithin: the overlap of an interval with ordered disjoint ones.
func TestWithin(t *testing.T) {
	ivs := [][2]int64{{0, 10}, {20, 30}, {40, 50}}
	for _, c := range []struct{ from, to, want int64 }{
		{0, 50, 30}, {5, 25, 10}, {10, 20, 0}, {45, 100, 5}, {-5, 3, 3}, {60, 70, 0}, {30, 20, 0},
	} {
		if got := within(ivs, c.from, c.to); got != c.want {
			t.Errorf("within(%d, %d) = %d; want %d", c.from, c.to, got, c.want)
		}
	}
}
