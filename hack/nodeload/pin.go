package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

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
	return eachThread(pid, func(tid int) error {
		err := unix.SchedSetaffinity(tid, &set)
		if err != nil && err != unix.ESRCH {
			return fmt.Errorf("pinning thread %d of process %d to CPU %d: %w", tid, pid, cpu, err)
		}
		return err
	})
}

// eachThread calls set once for every thread of process pid and returns
// how many it set. The thread list is walked until a walk finds no
// thread not yet set, so one created during a walk is not missed; a
// thread for which set returns unix.ESRCH ended and is not counted.
// Errors: reading /proc/<pid>/task, or set's other errors.
func eachThread(pid int, set func(tid int) error) (int, error) {
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
			if err := set(tid); err == unix.ESRCH {
				continue // the thread ended
			} else if err != nil {
				return len(done), err
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

// sliceProcess sets the EEVDF time slice of every thread of process pid
// to slice (sched_setattr with SCHED_OTHER and sched_runtime = slice, Linux
// 6.12 and newer; 100 µs to 100 ms), keeping each thread's nice value, and
// returns how many threads it set. A task with a shorter slice has an
// earlier virtual deadline, so when it wakes it preempts a task with a
// longer one sooner, and it runs shorter turns. It is part of how the
// tool can measure (the -sched-slice flag), not something the gateway
// asks of its host. The thread list is walked until a walk finds no
// thread it has not set, as pinProcess does; threads created afterwards
// are not set.
func sliceProcess(pid int, slice time.Duration) (int, error) {
	return eachThread(pid, func(tid int) error {
		attr, err := unix.SchedGetAttr(tid, 0)
		if err == nil {
			attr.Size = unix.SizeofSchedAttr
			attr.Policy = unix.SCHED_NORMAL
			attr.Flags = 0
			attr.Runtime = uint64(slice.Nanoseconds())
			err = unix.SchedSetAttr(tid, attr, 0)
		}
		if err != nil && err != unix.ESRCH {
			return fmt.Errorf("setting the time slice of thread %d of process %d to %s: %w", tid, pid, slice, err)
		}
		return err
	})
}

// sliceOf is the EEVDF time slice thread tid runs with (sched_getattr's
// sched_runtime), 0 when it has none of its own.
func sliceOf(tid int) (time.Duration, error) {
	attr, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return 0, err
	}
	return time.Duration(attr.Runtime), nil
}
