package main

import (
	"bytes"
	"io"
	"os"
	"runtime/trace"
	"strings"
	"testing"
	"time"
)

// TestReadSyscallsCountsEachWrite traces this process while it writes 50
// messages to a loopback socket and reads them back, and checks that the
// trace's count gives exactly 50 writes at the writing function's site,
// each with its time inside the call, and that the report divides by the
// operations the trace's window holds.
func TestReadSyscallsCountsEachWrite(t *testing.T) {
	c, peer := loopbackPair(t)
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Fatal(err)
	}
	start := time.Now().UnixNano()
	const n = 50
	got := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(peer, make([]byte, n*8))
		got <- err
	}()
	writeMessages(t, c, n)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	end := time.Now().UnixNano()
	trace.Stop()

	s, err := readSyscalls(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var site *siteStats
	for k, v := range s.sites {
		if strings.HasPrefix(k, "syscall.write ← ") && strings.Contains(k, "writeMessages") {
			site = v
		}
	}
	if site == nil {
		t.Fatalf("no write site naming writeMessages in %v", keys(s.sites))
	}
	if site.n != n || len(site.took) != n {
		t.Errorf("writes at the site: %d (%d timed); want %d", site.n, len(site.took), n)
	}
	if s.calls < n || s.pStarts == 0 || s.threads == 0 {
		t.Errorf("calls %d, P starts %d, threads %d", s.calls, s.pStarts, s.threads)
	}
	if !(s.first <= end && s.last >= start) {
		t.Errorf("trace window [%d, %d] does not overlap the writes [%d, %d]", s.first, s.last, start, end)
	}

	path := t.TempDir() + "/trace"
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	ops := []opTiming{{done: start}, {done: end}, {done: s.last + int64(time.Hour)}}
	var out bytes.Buffer
	r := result{}
	if err := syscallReport(&out, path, ops, r); err != nil {
		t.Fatal(err)
	}
	if want := float64(s.calls) / 2; r["gateway_syscalls_per_op"] != want {
		t.Errorf("system calls per operation %v; want %v (2 operations inside the window)\n%s", r["gateway_syscalls_per_op"], want, out.String())
	}
	if !strings.Contains(out.String(), "writeMessages") {
		t.Errorf("report names no writeMessages site:\n%s", out.String())
	}
}

// writeMessages writes n messages of 8 bytes to c, one write each.
func writeMessages(t *testing.T, c io.Writer, n int) {
	for i := range n {
		if _, err := c.Write([]byte{byte(i), 1, 2, 3, 4, 5, 6, 7}); err != nil {
			t.Fatal(err)
		}
	}
}

func keys(m map[string]*siteStats) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	return k
}
