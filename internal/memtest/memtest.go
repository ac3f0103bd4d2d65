// Package memtest measures memory in tests that show an input's cost is
// bounded before its limit check (read limits first, then parse).
package memtest

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"testing"
)

// AllocatedDuring returns the bytes the whole process allocated on the
// heap while f ran (runtime.MemStats.TotalAlloc before and after, after a
// collection): f's own allocations plus any other goroutine's meanwhile,
// so a bound asserted on it is an upper bound for f.
func AllocatedDuring(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// envAlone names the test a child process of the test binary runs on its
// own (InOwnProcess).
const envAlone = "SANDGATE_MEMTEST_ALONE"

// InOwnProcess runs the calling top-level test again, alone, in a new
// process of the test binary, so that the live heap it reads holds only
// its own work and not what goroutines left by the package's earlier
// tests still allocate or free meanwhile (runtime.MemStats is the
// process's). It returns true in that child, where the test goes on, and
// false in the parent, which has already logged the child's output and
// failed the test if the child failed. Flags the child gets: -test.run
// with the test's name anchored, -test.count=1 and -test.v.
func InOwnProcess(t *testing.T) bool {
	t.Helper()
	if os.Getenv(envAlone) == t.Name() {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envAlone+"="+t.Name())
	out, err := cmd.CombinedOutput()
	t.Logf("%s alone in a process of its own:\n%s", t.Name(), out)
	if err != nil {
		t.Fatalf("%s in a process of its own: %v", t.Name(), err)
	}
	if !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
		t.Fatalf("%s in a process of its own did not report a pass", t.Name())
	}
	return false
}
