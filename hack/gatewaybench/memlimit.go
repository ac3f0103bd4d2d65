package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// memoryCgroup is the memory cgroup a proxy runs in with -memory-limit:
// cgroup v2 when the unified hierarchy at /sys/fs/cgroup has the memory
// controller, else v1's memory controller at /sys/fs/cgroup/memory. Its
// usage counts the proxy's anonymous memory and the page cache it
// faulted in, the pages of its own binary included (startCaddy runs a
// fresh copy whose cache was dropped, so those pages are charged here and
// not to whoever read the binary first). The page cache fills it up to
// the limit, and the kernel then reclaims cold pages of the binary; what
// cannot be reclaimed is the anonymous memory, and when that does not fit
// the OOM killer ends the proxy.
type memoryCgroup struct {
	dir string
	v2  bool
}

// newMemoryCgroup creates the cgroup <name> with a memory limit of limit
// bytes (and no swap). It fails when neither hierarchy is writable here
// (not root, or no memory controller).
func newMemoryCgroup(name string, limit int64) (*memoryCgroup, error) {
	g := &memoryCgroup{}
	if ctl, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(" "+string(ctl)+" ", " memory ") {
		g.v2, g.dir = true, filepath.Join("/sys/fs/cgroup", name)
	} else {
		g.dir = filepath.Join("/sys/fs/cgroup/memory", name)
	}
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		return nil, fmt.Errorf("-memory-limit: creating the memory cgroup: %w", err)
	}
	limitFile, limitValue := "memory.limit_in_bytes", strconv.FormatInt(limit, 10)
	if g.v2 {
		limitFile = "memory.max"
	}
	if err := os.WriteFile(filepath.Join(g.dir, limitFile), []byte(limitValue), 0); err != nil {
		g.remove()
		return nil, fmt.Errorf("-memory-limit: setting %s: %w", limitFile, err)
	}
	if g.v2 {
		_ = os.WriteFile(filepath.Join(g.dir, "memory.swap.max"), []byte("0"), 0) // absent without swap accounting
	}
	return g, nil
}

// procs is the file a process writes its PID into to join the cgroup.
func (g *memoryCgroup) procs() string { return filepath.Join(g.dir, "cgroup.procs") }

// oomKills returns how many of the cgroup's processes the kernel's OOM
// killer ended (v1 memory.oom_control, v2 memory.events: oom_kill).
func (g *memoryCgroup) oomKills() (int64, error) {
	if g.v2 {
		return g.field("memory.events", "oom_kill")
	}
	return g.field("memory.oom_control", "oom_kill")
}

// anon returns the cgroup's anonymous memory in bytes (v1 memory.stat
// total_rss, v2 anon): the proxies' own memory, without page cache.
func (g *memoryCgroup) anon() (int64, error) {
	if g.v2 {
		return g.field("memory.stat", "anon")
	}
	return g.field("memory.stat", "total_rss")
}

// field returns the number on the line "<key> <number>" of the cgroup's
// file name.
func (g *memoryCgroup) field(name, key string) (int64, error) {
	data, err := os.ReadFile(filepath.Join(g.dir, name))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s has no %s line", name, key)
}

// usage returns the cgroup's current memory use in bytes.
func (g *memoryCgroup) usage() (int64, error) {
	name := "memory.usage_in_bytes"
	if g.v2 {
		name = "memory.current"
	}
	data, err := os.ReadFile(filepath.Join(g.dir, name))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
}

// remove deletes the cgroup; its processes must have exited.
func (g *memoryCgroup) remove() {
	_ = os.Remove(g.dir)
}

// freshCopy copies the binary src to dst, syncs it and drops the copy's
// page cache, so that its pages are charged to the process that runs it.
func freshCopy(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	err = errors.Join(err, out.Sync())
	if err == nil {
		err = unix.Fadvise(int(out.Fd()), 0, 0, unix.FADV_DONTNEED)
	}
	return errors.Join(err, out.Close())
}

// parseSize reads a size such as 64MiB, 1GiB or a number of bytes.
func parseSize(s string) (int64, error) {
	mult := int64(1)
	for suffix, m := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if v, ok := strings.CutSuffix(s, suffix); ok {
			s, mult = v, m
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("bad size %q (want a positive number of bytes, KiB, MiB or GiB, below 8 EiB)", s)
	}
	return n * mult, nil
}
