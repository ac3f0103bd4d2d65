// Package gatewayproc runs the built gateway (bin/caddy) as a separate
// process for the measuring tools under hack/ (nodeload, scaleload, attack) and
// reads its resident memory and CPU time from /proc, so that what they
// report is the gateway's own use, measured from outside it. Linux only.
package gatewayproc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/internal/freeport"
)

// Process is one running gateway.
type Process struct {
	// Pid is the gateway's process ID.
	Pid    int
	cmd    *exec.Cmd
	exited chan error
}

// Start writes caddyfile to dir/Caddyfile and runs "<caddy> run --config
// dir/Caddyfile --adapter caddyfile" with HOME and the XDG directories in
// dir (so autosave and storage stay there) and the rest of this process's
// environment, plus env ("NAME=value"). The gateway's standard output and
// error go to output (nil: discarded). Errors: the file cannot be written
// or the binary not started.
func Start(caddy, dir, caddyfile string, output io.Writer, env ...string) (*Process, error) {
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(caddyfile), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(caddy, "run", "--config", path, "--adapter", "caddyfile")
	cmd.Env = append(append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir), env...)
	if output == nil {
		output = io.Discard
	}
	cmd.Stdout, cmd.Stderr = output, output
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", caddy, err)
	}
	p := &Process{Pid: cmd.Process.Pid, cmd: cmd, exited: make(chan error, 1)}
	go func() { p.exited <- cmd.Wait() }()
	return p, nil
}

// WaitListening waits up to 60 s until addr accepts TCP connections on
// sockets the gateway process alone holds (a port another process took
// after it was picked answers a dial too, while the gateway fails to bind
// it or, when the other process is a Caddy too, shares it: SO_REUSEPORT);
// it fails at once when the gateway exits or shares the port. Caddy binds
// its admin endpoint with SO_REUSEPORT too: a caller that picked the admin
// address (freeport) and uses it checks it with a second call. The check
// holds for the start only: a process that binds the port with
// SO_REUSEPORT later shares it unnoticed (freeport.Listeners).
func (p *Process) WaitListening(addr string) error {
	return p.WaitListeningFor(addr, time.Minute)
}

// WaitListeningFor is WaitListening with its own limit d (a gateway
// that provisions a large node credential file on a slow machine takes
// longer than a minute to listen).
func (p *Process) WaitListeningFor(addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		select {
		case err := <-p.exited:
			p.exited <- err
			return fmt.Errorf("the gateway exited: %v", err)
		default:
		}
		if alone, err := freeport.ListeningAlone(p.Pid, addr); alone || err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond) // polling for the listener
	}
	return fmt.Errorf("the gateway did not listen on %s within %s", addr, d)
}

// Stop sends SIGTERM and waits up to 30 s for the gateway to exit, then
// kills it.
func (p *Process) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// Memory returns the gateway's resident set size now (VmRSS) and its peak
// since it started or ResetPeak (VmHWM, the kernel's high-water mark), in
// KiB.
func (p *Process) Memory() (rss, peak int64, err error) { return Memory(p.Pid) }

// ResetPeak resets the kernel's VmHWM of the gateway to its current RSS,
// so that Memory's peak covers only what follows.
func (p *Process) ResetPeak() error { return ResetPeak(p.Pid) }

// Memory returns VmRSS and VmHWM of process pid, in KiB.
func Memory(pid int) (rss, peak int64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	var errs []error
	for _, line := range strings.Split(string(data), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		errs = append(errs, err)
		if name == "VmRSS" {
			rss = n
		} else {
			peak = n
		}
	}
	if rss == 0 || peak == 0 {
		errs = append(errs, errors.New("no VmRSS or VmHWM in /proc status"))
	}
	return rss, peak, errors.Join(errs...)
}

// ResetPeak resets the VmHWM of process pid to its current RSS (writing 5
// to /proc/<pid>/clear_refs).
func ResetPeak(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// ClockTicks is USER_HZ, the unit of utime and stime in /proc (100 on
// Linux).
const ClockTicks = 100

// CPUTicks returns utime+stime of process pid, in ClockTicks, and when
// they were read; an error when /proc/<pid>/stat cannot be read or has
// fewer fields than that.
func CPUTicks(pid int) (int64, time.Time, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	now := time.Now()
	if err != nil {
		return 0, now, err
	}
	t, err := statCPUTicks(string(data))
	if err != nil {
		return 0, now, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return t, now, nil
}

// statCPUTicks returns utime+stime from the text of a /proc/<pid>/stat
// file: fields 14 and 15 of the line, counted after the parenthesised
// command name (which may hold spaces and parentheses itself).
func statCPUTicks(s string) (int64, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return 0, errors.New("no command name in parentheses")
	}
	fields := strings.Fields(s[i+2:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 13", len(fields))
	}
	ut, err1 := strconv.ParseInt(fields[11], 10, 64)
	st, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return ut + st, nil
}

// CPUTime returns utime+stime of process pid (all its threads, live and
// exited) as a duration; errors as CPUTicks'.
func CPUTime(pid int) (time.Duration, error) {
	t, _, err := CPUTicks(pid)
	return time.Duration(t) * time.Second / ClockTicks, err
}

// CPUPercent converts ticks of CPU time over wall time d to percent of one
// core.
func CPUPercent(ticks int64, d time.Duration) float64 {
	return float64(ticks) / ClockTicks / d.Seconds() * 100
}

// Output collects a process's standard output and error for Start; it is
// safe for the concurrent writes of the process's two streams and the
// reads of a test.
type Output struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

// String returns everything written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// SaveMargin is how long Save waits for an answer beyond the time the
// endpoint itself takes: 5 minutes, room for a snapshot of 50,000
// goroutines on an emulated CPU (hack/vm).
const SaveMargin = 5 * time.Minute

// Save writes what url answers into file: a profile or trace from Caddy's
// admin endpoint (/debug/pprof/…), for the tools' -profile and -trace
// options. lasts is how long the endpoint itself takes to answer (the
// seconds of a CPU profile or trace; 0 for a heap or goroutine snapshot):
// the exchange is cut after lasts plus SaveMargin. Errors: the request's
// (a timeout among them), a status other than 200 (named), the file's.
func Save(url, file string, lasts time.Duration) error {
	client := &http.Client{Timeout: lasts + SaveMargin}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	return errors.Join(err, f.Close())
}

// SaveCPUProfile writes a CPU profile of d (at least one second) from the
// Caddy admin endpoint at admin (a base URL, "http://127.0.0.1:2019") into
// file; errors as Save's.
func SaveCPUProfile(admin string, d time.Duration, file string) error {
	return saveFor(admin, "profile", d, file)
}

// SaveTrace writes a runtime execution trace of d (at least one second)
// from the Caddy admin endpoint at admin into file; errors as Save's.
func SaveTrace(admin string, d time.Duration, file string) error {
	return saveFor(admin, "trace", d, file)
}

// saveFor saves /debug/pprof/<endpoint>?seconds=<d, at least 1> from admin
// into file, giving the exchange those seconds plus SaveMargin.
func saveFor(admin, endpoint string, d time.Duration, file string) error {
	s := max(1, int(d.Seconds()))
	return Save(fmt.Sprintf("%s/debug/pprof/%s?seconds=%d", admin, endpoint, s), file, time.Duration(s)*time.Second)
}
