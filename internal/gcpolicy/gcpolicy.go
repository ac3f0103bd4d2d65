// Package gcpolicy is the gateway's garbage-collection policy: GOGC 400
// (the constant GOGC) unless the operator set the GOGC environment
// variable (OperatorGOGC: set and not empty, the rule corectl's start-up
// GOGC follows too), under the soft memory limit that Caddy itself sets when it
// starts (`caddy run` applies github.com/KimMachineGun/automemlimit: 90 %
// of the container's cgroup memory limit, or of the machine's memory
// without one, unless GOMEMLIMIT or AUTOMEMLIMIT says otherwise). That
// limit is the only one: this package reads it for the log and sets none.
//
// Why 400: at the node hub's live heap (about 70 MB with 10,000 nodes)
// GOGC 100 collects every few seconds under dispatch load, and on the one
// core the gateway is given each mark phase delays the frames waiting
// behind it; GOGC 400 makes collections about four times rarer, while the
// soft limit still bounds the heap by the container's memory (the
// collector runs more often as the heap nears it). docs/node-connect.md
// ("On a core of its own") has the runs that decided it.
package gcpolicy

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
)

// GOGC is the collector's target percentage (heap growth over the live
// heap before the next collection) that the gateway sets when the
// environment has no GOGC.
const GOGC = 400

// OperatorGOGC reports whether the operator set GOGC: the environment
// variable is set and not empty. An explicit value ("200", "off", even one
// the runtime cannot read and takes as 100) is the operator's and always
// wins over a program's policy; an empty GOGC= is no setting (the Go
// runtime reads it as its default, 100), so the program's policy applies
// as if GOGC were unset. Both the gateway (Apply) and corectl (its GOGC
// during the start-up replay, corectl/daemon) decide with it.
func OperatorGOGC() bool { return os.Getenv("GOGC") != "" }

// Decision is what Apply found and did.
type Decision struct {
	// GOGC is the percentage in force after Apply: the package's GOGC, or
	// the operator's (-1 for "off").
	GOGC int
	// Operator is true when the environment set GOGC (OperatorGOGC): the
	// runtime keeps the operator's value and nothing is changed.
	Operator bool
	// MemoryLimit is the runtime's soft memory limit in bytes as Caddy (or
	// GOMEMLIMIT) left it; math.MaxInt64 means none.
	MemoryLimit int64
}

// String describes the decision for the start-up log, in one line.
func (d Decision) String() string {
	gogc := strconv.Itoa(d.GOGC)
	if d.GOGC < 0 {
		gogc = "off"
	}
	s := "GOGC=" + gogc + " (the gateway's default; the environment sets no GOGC)"
	if d.Operator {
		s = "GOGC=" + gogc + " set by the operator: kept"
	}
	if d.MemoryLimit <= 0 || d.MemoryLimit == math.MaxInt64 {
		return s + "; no soft memory limit"
	}
	return fmt.Sprintf("%s; soft memory limit %d bytes (Caddy's: 90 %% of the container's or the machine's memory, or GOMEMLIMIT)", s, d.MemoryLimit)
}

// Apply sets GOGC to the package's GOGC unless the operator set GOGC
// (OperatorGOGC), and returns the decision with the memory limit in force,
// for the log. Call it once per process.
func Apply() Decision {
	d := Decision{GOGC: GOGC, MemoryLimit: debug.SetMemoryLimit(-1)}
	if OperatorGOGC() {
		// Reading the percentage in force means setting one: set it back.
		d.Operator = true
		d.GOGC = debug.SetGCPercent(100)
		debug.SetGCPercent(d.GOGC)
		return d
	}
	debug.SetGCPercent(d.GOGC)
	return d
}
