package kubetest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CPU is the CPU time (utime+stime from /proc/<pid>/stat, all threads) of
// the benchmark's own process and of the control plane envtest started
// as its children, so a benchmark can report what each side spent.
type CPU struct {
	// Self is this process: the code under test and the test's clients.
	Self time.Duration
	// APIServer is kube-apiserver.
	APIServer time.Duration
	// Etcd is etcd.
	Etcd time.Duration
}

// Sub returns c - d field by field.
func (c CPU) Sub(d CPU) CPU {
	return CPU{Self: c.Self - d.Self, APIServer: c.APIServer - d.APIServer, Etcd: c.Etcd - d.Etcd}
}

// ReadCPU reads the CPU time of this process and of its kube-apiserver and
// etcd children (Linux /proc). Errors: /proc cannot be read, or a
// control-plane child is not found.
func ReadCPU() (CPU, error) {
	var c CPU
	var err error
	if c.Self, err = cpuTime(os.Getpid()); err != nil {
		return c, err
	}
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return c, err
	}
	self := os.Getpid()
	var found int
	for _, f := range stats {
		name, ppid, ticks, err := parseStat(f)
		if err != nil || ppid != self {
			continue // gone since the glob, or not ours
		}
		switch name {
		case "kube-apiserver":
			c.APIServer, found = ticks, found|1
		case "etcd":
			c.Etcd, found = ticks, found|2
		}
	}
	if found != 3 {
		return c, errors.New("kubetest: kube-apiserver or etcd is not a child of this process")
	}
	return c, nil
}

// userHZ is the unit of utime and stime in /proc (USER_HZ, 100 on Linux).
const userHZ = 100

// ProcessCPU is the CPU time (utime+stime, all threads) process pid has
// used so far (Linux /proc). Errors: /proc/<pid>/stat cannot be read or
// parsed.
func ProcessCPU(pid int) (time.Duration, error) { return cpuTime(pid) }

func cpuTime(pid int) (time.Duration, error) {
	_, _, t, err := parseStat(fmt.Sprintf("/proc/%d/stat", pid))
	return t, err
}

// parseStat returns the command name, parent PID and utime+stime of a
// /proc/<pid>/stat file.
func parseStat(path string) (string, int, time.Duration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", 0, 0, err
	}
	s := string(data)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open || end+2 > len(s) {
		return "", 0, 0, fmt.Errorf("%s: unexpected format", path)
	}
	// After the name: state, ppid, …; utime and stime are fields 14 and
	// 15 of the line, 12 and 13 after the name.
	f := strings.Fields(s[end+2:])
	if len(f) < 13 {
		return "", 0, 0, fmt.Errorf("%s: %d fields", path, len(f))
	}
	ppid, err1 := strconv.Atoi(f[1])
	ut, err2 := strconv.ParseInt(f[11], 10, 64)
	st, err3 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return "", 0, 0, fmt.Errorf("%s: %w", path, err)
	}
	return s[open+1 : end], ppid, time.Duration(ut+st) * time.Second / userHZ, nil
}
