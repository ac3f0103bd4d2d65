// Package memlimit is the gateway's garbage-collection policy: a soft
// memory limit (runtime/debug.SetMemoryLimit) of Ratio of the memory limit
// of the container the process runs in, read from its cgroup, unless the
// operator set GOMEMLIMIT. With it the collector runs as GOGC says while
// the heap is small and more often only as the process nears its
// container's limit, instead of letting the heap double past it and the
// kernel kill the process.
//
// The container's limit is read from the process's own cgroup (the paths
// in /proc/self/cgroup): cgroup v2's memory.max, or cgroup v1's
// memory.limit_in_bytes of the memory controller. "max", a v1 value of
// 2^62 bytes or more (v1's way of saying none), no memory controller, or
// no file mean no container limit: nothing is changed.
package memlimit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
)

// Ratio is the share of the container's memory limit that becomes the Go
// runtime's soft limit; the rest is headroom for memory the runtime does
// not count (the kernel's socket buffers, page cache charged to the
// cgroup) and for the collector to catch up.
const Ratio = 0.9

// Bounds on what is read, in bytes: /proc/self/cgroup (one line per
// hierarchy) and a limit file (one decimal number or "max").
const (
	maxCgroupFile = 16 << 10
	maxLimitFile  = 64
)

// v1Unlimited: a cgroup v1 limit at or above it means no limit (the
// kernel reports the largest page-aligned int64).
const v1Unlimited = 1 << 62

// ErrInvalid is the class of a cgroup file whose content is not what the
// kernel writes there (a limit that is not a positive number, a file over
// its size bound).
var ErrInvalid = errors.New("memlimit: invalid cgroup file")

// Decision is what Decide found and Apply did.
type Decision struct {
	// Container is the container's memory limit in bytes, 0 when none
	// was found.
	Container int64
	// Source is the file Container was read from (relative to the root
	// given to Decide), or "" when none.
	Source string
	// Limit is the soft limit in bytes to apply: Ratio of Container; 0
	// when nothing is to be applied.
	Limit int64
	// Operator is GOMEMLIMIT's value when the operator set it: then
	// Limit is 0 and the runtime keeps the operator's limit.
	Operator string
}

// String describes the decision for the start-up log, in the field's
// terms.
func (d Decision) String() string {
	switch {
	case d.Operator != "":
		return "GOMEMLIMIT=" + d.Operator + " set by the operator: kept"
	case d.Limit > 0:
		return fmt.Sprintf("soft memory limit %d bytes: %.0f%% of the container's %d bytes (%s)", d.Limit, Ratio*100, d.Container, d.Source)
	}
	return "no container memory limit found: the Go runtime's memory limit is left as it is"
}

// Decide reads the container's memory limit under root (the file system
// root, os.DirFS("/") in production) and decides the soft limit;
// gomemlimit is the GOMEMLIMIT environment variable ("" when unset), which
// wins. A missing file is no limit; an unreadable or malformed one is an
// error (wrapping ErrInvalid when malformed), with nothing to apply.
func Decide(root fs.FS, gomemlimit string) (Decision, error) {
	if gomemlimit != "" {
		return Decision{Operator: gomemlimit}, nil
	}
	v2, v1, err := cgroupPaths(root)
	if err != nil {
		return Decision{}, err
	}
	var candidates []string
	if v2 != "" {
		candidates = append(candidates, path.Join("sys/fs/cgroup", v2, "memory.max"))
	}
	if v1 != "" {
		candidates = append(candidates, path.Join("sys/fs/cgroup/memory", v1, "memory.limit_in_bytes"))
	}
	// Inside a container with its own cgroup namespace the paths are "/",
	// which the joins above already give; a host path that the container
	// does not see falls back to the mount's top.
	candidates = append(candidates, "sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes")
	for _, name := range candidates {
		n, ok, err := readLimit(root, name)
		if err != nil {
			return Decision{}, err
		}
		if !ok {
			continue
		}
		if n <= 0 {
			return Decision{}, nil // found: no limit
		}
		return Decision{Container: n, Source: "/" + name, Limit: int64(float64(n) * Ratio)}, nil
	}
	return Decision{}, nil
}

// Apply decides with the real file system and environment and sets the
// soft limit when there is one to set. It returns the decision for the
// log.
func Apply() (Decision, error) {
	d, err := Decide(os.DirFS("/"), os.Getenv("GOMEMLIMIT"))
	if err != nil {
		return d, err
	}
	if d.Limit > 0 {
		debug.SetMemoryLimit(d.Limit)
	}
	return d, nil
}

// cgroupPaths returns the process's cgroup v2 path and its cgroup v1
// memory controller's path from proc/self/cgroup ("" for each not there).
func cgroupPaths(root fs.FS) (v2, v1 string, err error) {
	data, err := readBounded(root, "proc/self/cgroup", maxCgroupFile)
	if errors.Is(err, fs.ErrNotExist) {
		return "", "", nil
	}
	if err != nil {
		return "", "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		id, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		controllers, p, ok := strings.Cut(rest, ":")
		if !ok || !strings.HasPrefix(p, "/") {
			continue
		}
		if id == "0" && controllers == "" {
			v2 = p
			continue
		}
		for _, c := range strings.Split(controllers, ",") {
			if c == "memory" {
				v1 = p
			}
		}
	}
	return v2, v1, nil
}

// readLimit reads one limit file: ok false when it does not exist, n 0
// for "max" or a v1 value meaning none.
func readLimit(root fs.FS, name string) (n int64, ok bool, err error) {
	data, err := readBounded(root, name, maxLimitFile)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return 0, true, nil
	}
	n, err = strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, false, fmt.Errorf("%w: /%s: %q is not a byte count or max", ErrInvalid, name, s)
	}
	if n >= v1Unlimited {
		return 0, true, nil
	}
	return n, true, nil
}

// readBounded reads at most limit bytes of name; a longer file is
// ErrInvalid.
func readBounded(root fs.FS, name string, limit int) ([]byte, error) {
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("memlimit: reading /%s: %w", name, err)
	}
	if len(data) > limit {
		return nil, fmt.Errorf("%w: /%s is over %d bytes", ErrInvalid, name, limit)
	}
	return data, nil
}
