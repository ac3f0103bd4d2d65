// Package memtest measures memory in tests that show an input's cost is
// bounded before its limit check (read limits first, then parse).
package memtest

import "runtime"

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
