// Package crashpoint is nodeagent's test-only crash hook: named steps
// between the durable writes of preparation, repair, reclamation, lease
// installation and the native helper call Hit, and a test that sets the
// environment variable SANDGATE_CRASHPOINT makes the process stop exactly
// there, with no sleep involved.
//
// SANDGATE_CRASHPOINT is a comma-separated list of step[=action]:
//
//	kill        (the default) SIGKILL this process at the step
//	killparent  SIGKILL the parent process (the node, for a helper or
//	            preparer) and continue
//	hold:PATH   open the named pipe PATH for reading and block until the
//	            test writes to it or closes it, then continue
//
// Unset (as in production) every Hit is a no-op costing one map lookup.
package crashpoint

import (
	"io"
	"os"
	"strings"
	"syscall"
)

// Env is the environment variable read once at start-up.
const Env = "SANDGATE_CRASHPOINT"

var points = parse(os.Getenv(Env))

func parse(s string) map[string]string {
	if s == "" {
		return nil
	}
	m := map[string]string{}
	for _, e := range strings.Split(s, ",") {
		step, action, _ := strings.Cut(strings.TrimSpace(e), "=")
		if action == "" {
			action = "kill"
		}
		m[step] = action
	}
	return m
}

// Hit acts on step if SANDGATE_CRASHPOINT names it; see the package
// comment.
func Hit(step string) {
	action, ok := points[step]
	if !ok {
		return
	}
	switch {
	case action == "kill":
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not deliverable late; never return
	case action == "killparent":
		syscall.Kill(os.Getppid(), syscall.SIGKILL)
	case strings.HasPrefix(action, "hold:"):
		if f, err := os.Open(strings.TrimPrefix(action, "hold:")); err == nil {
			io.ReadAll(io.LimitReader(f, 1))
			f.Close()
		}
	}
}
