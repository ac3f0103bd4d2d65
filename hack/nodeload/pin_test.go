package main

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPinProcess: every thread of a child process is pinned to the CPU
// asked for, one this process may use.
func TestPinProcess(t *testing.T) {
	cpus, err := cpusOf(0)
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(cpus, ",")
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	cpu, err := strconv.Atoi(first)
	if err != nil {
		t.Fatal(err)
	}
	n, err := pinProcess(cmd.Process.Pid, cpu)
	if err != nil || n < 1 {
		t.Fatalf("pinProcess: %d threads, %v", n, err)
	}
	got, err := cpusOf(cmd.Process.Pid)
	if err != nil || got != first {
		t.Fatalf("the child runs on CPUs %q (%v), want %q", got, err, first)
	}
}

// TestSliceProcess: every thread of a child process gets the EEVDF time
// slice asked for, read back with sched_getattr.
func TestSliceProcess(t *testing.T) {
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	n, err := sliceProcess(cmd.Process.Pid, 300*time.Microsecond)
	if err != nil || n < 1 {
		t.Fatalf("sliceProcess: %d threads, %v", n, err)
	}
	got, err := sliceOf(cmd.Process.Pid)
	if err != nil || got != 300*time.Microsecond {
		t.Fatalf("the child's slice is %s (%v); want 300µs", got, err)
	}
}
