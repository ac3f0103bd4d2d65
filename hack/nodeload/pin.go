package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// pinProcess sets the CPU affinity of every thread of process pid to the
// one CPU cpu, as `taskset -a -p -c <cpu> <pid>` does, and returns how
// many threads it set. Threads the process creates later inherit the
// affinity of the thread creating them; the thread list is walked until
// a walk finds no thread it has not set, so one created during a walk is
// not missed.
func pinProcess(pid, cpu int) (int, error) {
	var set unix.CPUSet
	set.Set(cpu)
	done := map[int]bool{}
	for {
		entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return len(done), err
		}
		fresh := 0
		for _, e := range entries {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil {
				if err == unix.ESRCH {
					continue // the thread ended
				}
				return len(done), fmt.Errorf("pinning thread %d of process %d to CPU %d: %w", tid, pid, cpu, err)
			}
			done[tid] = true
			fresh++
		}
		if fresh == 0 {
			return len(done), nil
		}
	}
}

// cpusOf lists the CPUs process pid (0: this one) may run on, as taskset
// -c prints them one by one ("0,1").
func cpusOf(pid int) (string, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(pid, &set); err != nil {
		return "", err
	}
	var cpus []string
	for i := range 1024 {
		if set.IsSet(i) {
			cpus = append(cpus, strconv.Itoa(i))
		}
	}
	return strings.Join(cpus, ","), nil
}
