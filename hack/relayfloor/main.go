// Command relayfloor measures the floor under hack/nodeload's round trip on
// this machine: the same shape of load (an open-loop schedule of operations
// from a timing process, each to one of N connected "nodes" through a
// relay pinned to a CPU of its own, the nodes and the timing process
// sharing the other CPU, the nodes' heartbeats beside it) through a relay
// that does nothing but copy fixed-size messages. The relay is written as
// the gateway's node hub is (a goroutine reading each connection, a write
// lock per connection, Go's runtime with the gateway image's GODEBUG), and
// it can be made to spend CPU (-work) and allocate (-alloc, over a live
// heap of -live-mib) per operation, so the tail of a relay that costs what
// the gateway costs, but runs neither Caddy's HTTP server, WebSockets, JSON
// nor the hub, can be read beside nodeload's figures (docs/benchmarks.md
// "Issue 33: the node round trip's floor on this machine").
//
// Three processes, as in nodeload: the relay (this binary with -role relay,
// pinned with taskset to -relay-cpu), the nodes (-role nodes: N TCP
// connections, each echoing every operation back at once, and one
// goroutine sending every node's 256-byte heartbeat once per -heartbeat,
// which the relay answers), and this process, which waits for each due
// time with hack/pacer, sends each operation on a goroutine of its own over
// a kept TCP connection to the relay and times it from its scheduled send
// time. Run it under `taskset -c 1` so that the nodes and the timing
// process share CPU 1 and the relay has CPU 0:
//
//	go build -o /tmp/relayfloor ./hack/relayfloor
//	taskset -c 1 /tmp/relayfloor -nodes 10000 -rate 1000 -duration 30s
//
// It refuses to run when its own CPUs include -relay-cpu. It prints one
// line: the operations, the round trip's p50, p90, p99, p99.9 and maximum
// from the scheduled send, the CPU the relay, the nodes and this process
// used during the phase (percent of one core and microseconds per
// operation, from /proc/<pid>/stat; the relay's counts the heartbeats it
// answered too), the CPUs each ran on and the load average at the end.
package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/hack/gatewayproc"
	"github.com/sandgate/sandgate/hack/pacer"
	"github.com/sandgate/sandgate/internal/freeport"
)

// msgSize is the size of every message, in bytes: about the size of the
// hub's request and response frames (300 and 370 bytes in nodeload).
const msgSize = 256

// Message layout (little-endian): byte 0 the kind; bytes 4–8 the API
// connection the relay read the operation from (the relay writes it);
// bytes 8–12 the node; bytes 12–20 the operation's sequence number, echoed.
const (
	kindOperation = 1
	kindHeartbeat = 2
)

// lockedConn is a connection whose writes are serialized, as the hub's
// are.
type lockedConn struct {
	mu sync.Mutex
	c  net.Conn
}

func (l *lockedConn) write(b []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.c.Write(b)
	return err
}

// table holds connections by index.
type table struct {
	mu    sync.RWMutex
	conns []*lockedConn
}

// get returns the connection at i, nil if there is none.
func (t *table) get(i int) *lockedConn {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if i < 0 || i >= len(t.conns) {
		return nil
	}
	return t.conns[i]
}

// set puts c at i; false if i is outside the table.
func (t *table) set(i int, c *lockedConn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if i < 0 || i >= len(t.conns) {
		return false
	}
	t.conns[i] = c
	return true
}

// add appends c and returns its index.
func (t *table) add(c *lockedConn) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.conns = append(t.conns, c)
	return len(t.conns) - 1
}

// relay copies operations from API connections to the nodes and their
// answers back, and answers heartbeats.
type relay struct {
	work  time.Duration // CPU spent per operation
	alloc int           // bytes allocated per operation
	nodes table         // by node index, sized to the nodes
	apis  table         // by API connection id, appended
	// registered, when not nil, receives each node's index once the
	// relay holds its connection.
	registered chan int
}

// sink keeps the per-operation allocation from being optimised away.
var sink []byte

// serveNodes accepts node connections on l until it is closed; each sends
// its index as 4 bytes first.
func (r *relay) serveNodes(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			var id [4]byte
			if _, err := io.ReadFull(c, id[:]); err != nil {
				return
			}
			idx := int(binary.LittleEndian.Uint32(id[:]))
			lc := &lockedConn{c: c}
			if !r.nodes.set(idx, lc) {
				return
			}
			if r.registered != nil {
				r.registered <- idx
			}
			buf := make([]byte, msgSize)
			for {
				if _, err := io.ReadFull(c, buf); err != nil {
					return
				}
				if buf[0] == kindHeartbeat {
					if lc.write(buf) != nil {
						return
					}
					continue
				}
				a := int(binary.LittleEndian.Uint32(buf[4:]))
				if ac := r.apis.get(a); ac != nil {
					_ = ac.write(buf)
				}
			}
		}()
	}
}

// serveAPI accepts API connections on l until it is closed.
func (r *relay) serveAPI(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		lc := &lockedConn{c: c}
		id := uint32(r.apis.add(lc))
		go func() {
			defer c.Close()
			buf := make([]byte, msgSize)
			for {
				if _, err := io.ReadFull(c, buf); err != nil {
					return
				}
				binary.LittleEndian.PutUint32(buf[4:], id)
				spin(r.work)
				if r.alloc > 0 {
					sink = make([]byte, r.alloc)
				}
				idx := int(binary.LittleEndian.Uint32(buf[8:]))
				nc := r.nodes.get(idx)
				if nc == nil {
					return // an operation for a node not connected: the tool fails on the closed connection
				}
				_ = nc.write(buf)
			}
		}()
	}
}

// spin spends d of CPU on the calling goroutine.
func spin(d time.Duration) {
	if d <= 0 {
		return
	}
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}

// connectNodes dials n node connections to addr; each echoes every
// operation it reads and drops the heartbeat acknowledgements.
func connectNodes(addr string, n int) ([]*lockedConn, error) {
	cs := make([]*lockedConn, n)
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		var id [4]byte
		binary.LittleEndian.PutUint32(id[:], uint32(i))
		if _, err := c.Write(id[:]); err != nil {
			return nil, err
		}
		lc := &lockedConn{c: c}
		cs[i] = lc
		go func() {
			buf := make([]byte, msgSize)
			for {
				if _, err := io.ReadFull(c, buf); err != nil {
					return
				}
				if buf[0] == kindHeartbeat {
					continue
				}
				if lc.write(buf) != nil {
					return
				}
			}
		}()
	}
	return cs, nil
}

// heartbeats sends each node's heartbeat once per interval from this one
// goroutine, the nodes' slots spread over the interval, until a write
// fails.
func heartbeats(cs []*lockedConn, interval time.Duration) {
	hb := make([]byte, msgSize)
	hb[0] = kindHeartbeat
	step := interval / time.Duration(len(cs))
	next := time.Now()
	for i := 0; ; i = (i + 1) % len(cs) {
		next = next.Add(step)
		time.Sleep(time.Until(next))
		if cs[i].write(hb) != nil {
			return
		}
	}
}

// keptConnections is how many idle connections to the relay operations
// keeps for the next operations (more are closed), as hack/nodeload's
// API client does.
const keptConnections = 1024

// operations sends rate operations a second for d to random nodes through
// the relay's API address, each on a goroutine of its own over a kept
// connection (at most keep kept idle; a new one dialed when none is), and
// returns each round trip from its scheduled send time. It fails if an
// answer is not its operation's echo.
func operations(addr string, nodes, rate int, d time.Duration, keep int) ([]time.Duration, error) {
	idle := make(chan net.Conn, keep)
	defer func() {
		close(idle)
		for c := range idle {
			_ = c.Close()
		}
	}()
	n := int(d.Seconds() * float64(rate))
	rtts := make([]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := time.Now().Add(10 * time.Millisecond)
	for i := range n {
		due := start.Add(time.Duration(i) * time.Second / time.Duration(rate))
		pacer.Until(due)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c net.Conn
			select {
			case c = <-idle:
			default:
				var err error
				if c, err = net.Dial("tcp", addr); err != nil {
					errs[i] = err
					return
				}
			}
			buf := make([]byte, msgSize)
			buf[0] = kindOperation
			binary.LittleEndian.PutUint32(buf[8:], uint32(rand.IntN(nodes)))
			binary.LittleEndian.PutUint64(buf[12:], uint64(i))
			if _, err := c.Write(buf); err != nil {
				errs[i] = err
				_ = c.Close()
				return
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				errs[i] = err
				_ = c.Close()
				return
			}
			rtts[i] = time.Since(due)
			if got := binary.LittleEndian.Uint64(buf[12:]); got != uint64(i) {
				errs[i] = fmt.Errorf("operation %d answered with %d's echo", i, got)
			}
			select {
			case idle <- c:
			default:
				_ = c.Close()
			}
		}()
	}
	wg.Wait()
	return rtts, errors.Join(errs...)
}

// quantile returns the q-quantile (0–1) of sorted, rounded to 1 µs.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i].Round(time.Microsecond)
}

// checkPinning returns an error unless self, the CPUs this process may
// run on (which the nodes it starts inherit), leaves relayCPU to the
// relay alone; else it returns the CPUs of self, as taskset -c lists them
// ("1", "2,3").
func checkPinning(self *unix.CPUSet, relayCPU int) (string, error) {
	var cpus []string
	for i := range 1024 {
		if self.IsSet(i) {
			cpus = append(cpus, strconv.Itoa(i))
		}
	}
	list := strings.Join(cpus, ",")
	if self.IsSet(relayCPU) {
		return "", fmt.Errorf("this process may run on CPUs %s, the relay's CPU %d among them: run it under taskset -c with the other CPUs (taskset -c 1 for -relay-cpu 0)", list, relayCPU)
	}
	if len(cpus) == 0 {
		return "", errors.New("this process may run on no CPU")
	}
	return list, nil
}

// loadAverage is /proc/loadavg's first three fields ("0.52 0.58 0.59").
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func main() {
	role := flag.String("role", "", "internal: relay or nodes (the processes this tool starts)")
	nodes := flag.Int("nodes", 10000, "node connections")
	rate := flag.Int("rate", 1000, "operations per second")
	duration := flag.Duration("duration", 30*time.Second, "length of the operations phase")
	settle := flag.Duration("settle", 10*time.Second, "wait after the nodes connected, before the phase (heartbeats running)")
	heartbeat := flag.Duration("heartbeat", 10*time.Second, "every node's heartbeat interval")
	relayCPU := flag.Int("relay-cpu", 0, "CPU the relay is pinned to (taskset -c)")
	relayEnv := flag.String("relay-env", "GODEBUG=schedtrace=86400000", "comma-separated VAR=value added to the relay's environment; the default is the gateway image's runtime setting")
	work := flag.Duration("work", 0, "CPU the relay spends per operation, beside its copying")
	alloc := flag.Int("alloc", 0, "bytes the relay allocates per operation")
	liveMiB := flag.Int("live-mib", 0, "MiB of pointer-holding live heap the relay keeps (the gateway holds about 70 MB with 10,000 nodes)")
	gogc := flag.Int("relay-gogc", 400, "the relay's GOGC (the gateway's default)")
	apiAddr := flag.String("api", "", "internal: the relay's API address")
	nodeAddr := flag.String("node", "", "internal: the relay's node address")
	flag.Parse()
	var err error
	switch *role {
	case "relay":
		err = runRelay(*apiAddr, *nodeAddr, *nodes, *work, *alloc, *liveMiB, *gogc)
	case "nodes":
		err = runNodes(*nodeAddr, *nodes, *heartbeat)
	case "":
		err = run(*nodes, *rate, *duration, *settle, *heartbeat, *relayCPU, *relayEnv, *work, *alloc, *liveMiB, *gogc)
	default:
		err = fmt.Errorf("-role %q: relay or nodes", *role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "relayfloor:", err)
		os.Exit(1)
	}
}

// live is the relay's kept heap.
var live [][]*[64]byte

func runRelay(apiAddr, nodeAddr string, nodes int, work time.Duration, alloc, liveMiB, gogc int) error {
	live = make([][]*[64]byte, liveMiB)
	for i := range live {
		live[i] = make([]*[64]byte, 1<<20/64)
		for j := range live[i] {
			live[i][j] = new([64]byte)
		}
	}
	debug.SetGCPercent(gogc)
	al, err := net.Listen("tcp", apiAddr)
	if err != nil {
		return err
	}
	nl, err := net.Listen("tcp", nodeAddr)
	if err != nil {
		return err
	}
	r := &relay{work: work, alloc: alloc, nodes: table{conns: make([]*lockedConn, nodes)}}
	go func() { _ = r.serveNodes(nl) }()
	fmt.Println("listening")
	return r.serveAPI(al)
}

func runNodes(addr string, n int, interval time.Duration) error {
	debug.SetGCPercent(400) // nodeload's -nodes-gogc default
	cs, err := connectNodes(addr, n)
	if err != nil {
		return err
	}
	fmt.Println("connected")
	heartbeats(cs, interval)
	return errors.New("a heartbeat write failed")
}

// child starts the command args, in which "{self}" stands for this
// binary, and waits for its first line of output to be want.
func child(want string, env []string, args ...string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args = slices.Clone(args)
	for i, a := range args {
		if a == "{self}" {
			args[i] = self
		}
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != want {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("%s: first line %q (%v), want %q", strings.Join(cmd.Args, " "), line, err, want)
	}
	return cmd, nil
}

func run(nodes, rate int, duration, settle, heartbeat time.Duration, relayCPU int, relayEnv string, work time.Duration, alloc, liveMiB, gogc int) error {
	var self unix.CPUSet
	if err := unix.SchedGetaffinity(0, &self); err != nil {
		return err
	}
	selfCPUs, err := checkPinning(&self, relayCPU)
	if err != nil {
		return err
	}
	apiAddr, err := freeport.Addr()
	if err != nil {
		return err
	}
	nodeAddr, err := freeport.Addr()
	if err != nil {
		return err
	}
	var env []string
	if relayEnv != "" {
		env = strings.Split(relayEnv, ",")
	}
	rl, err := child("listening", env, "taskset", "-c", strconv.Itoa(relayCPU), "{self}", "-role", "relay",
		"-nodes", strconv.Itoa(nodes), "-api", apiAddr, "-node", nodeAddr, "-work", work.String(),
		"-alloc", strconv.Itoa(alloc), "-live-mib", strconv.Itoa(liveMiB), "-relay-gogc", strconv.Itoa(gogc))
	if err != nil {
		return err
	}
	defer func() { _ = rl.Process.Kill(); _ = rl.Wait() }()
	nd, err := child("connected", nil, "{self}", "-role", "nodes", "-nodes", strconv.Itoa(nodes),
		"-node", nodeAddr, "-heartbeat", heartbeat.String())
	if err != nil {
		return err
	}
	defer func() { _ = nd.Process.Kill(); _ = nd.Wait() }()
	time.Sleep(settle) // a measurement parameter: the heartbeats' steady state before the phase
	pids := []int{rl.Process.Pid, nd.Process.Pid, os.Getpid()}
	before := make([]time.Duration, len(pids))
	for i, p := range pids {
		if before[i], err = gatewayproc.CPUTime(p); err != nil {
			return err
		}
	}
	t0 := time.Now()
	rtts, err := operations(apiAddr, nodes, rate, duration, keptConnections)
	elapsed := time.Since(t0)
	if err != nil {
		return err
	}
	cpu := make([]string, len(pids))
	for i, p := range pids {
		after, err := gatewayproc.CPUTime(p)
		if err != nil {
			return err
		}
		s := (after - before[i]).Seconds()
		cpu[i] = fmt.Sprintf("%.1f%% (%.0f µs per operation)", 100*s/elapsed.Seconds(), 1e6*s/float64(len(rtts)))
	}
	slices.Sort(rtts)
	fmt.Printf("operations %d at %d/s, %d nodes, relay work %v, alloc %d B, live %d MiB: round trip from the scheduled send p50 %v, p90 %v, p99 %v, p99.9 %v, max %v; CPU: relay %s, nodes %s, this tool %s; relay on CPU %d, nodes and this tool on %s; load average %s\n",
		len(rtts), rate, nodes, work, alloc, liveMiB, quantile(rtts, 0.5), quantile(rtts, 0.9), quantile(rtts, 0.99), quantile(rtts, 0.999), rtts[len(rtts)-1].Round(time.Microsecond),
		cpu[0], cpu[1], cpu[2], relayCPU, selfCPUs, loadAverage())
	return nil
}
