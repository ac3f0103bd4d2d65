// Command gatewaybench measures the gateway's own cost against a plain
// Caddy reverse_proxy, both the built bin/caddy, in one run: CPU per
// request (or per GiB) of every process, read from /proc/<pid>/stat, with
// the paths interleaved and repeated.
//
// Every piece runs in its own process on 127.0.0.1:
//
//   - the execd stand-in (integration/execdstub) and the fixed-entry +
//     OpenSandbox Ingress stand-in (integration/fixedentry, its request
//     record off), each started by re-running this program with -serve;
//   - the gateway: bin/caddy with an e2b_dataplane site, one token key, one
//     resource credential and one cluster whose fixed entry is the
//     stand-in;
//   - the baseline: bin/caddy with a plain `reverse_proxy <fixed entry>`
//     site, asked for the equivalent execd call directly;
//   - the client: this program.
//
// Workloads:
//
//   - listdir: Connect unary ListDir of a directory of -files files
//     through the gateway (POST /filesystem.Filesystem/ListDir, token,
//     routing headers) against GET /<sandbox>/44772/directories/list through
//     the reverse proxy, closed loop with c clients over kept-alive
//     connections for each c of -concurrency, each cell -cell long after a
//     short warm-up;
//   - transfer: one -transfer-mib download (GET /files?path= against GET
//     /<sandbox>/44772/files/download?path=) and upload (POST /files?path=
//     as application/octet-stream, and as the SDK's default multipart body,
//     against execd's multipart POST /<sandbox>/44772/files/upload with the
//     same bytes); every request carries a Content-Length;
//   - port: a request to a sandbox port as E2B_DOMAIN's SDKs address it
//     (GET http://3000-<sandbox>.bench.test/hello with the sandbox's
//     traffic token, e2b_dataplane's hosts routing, docs/dataplane.md
//     "Host routing") against GET /<sandbox>/3000/hello through the reverse
//     proxy, both answered by a small HTTP server behind the fixed entry
//     (64 bytes), in the cells of listdir;
//   - command: the SDK's commands.run of `echo hi` (Connect server stream
//     POST /process.Process/Start, /bin/bash -l -c "echo hi") through the
//     gateway against the same command line sent to execd's POST /command
//     (its event stream) through the reverse proxy, -commands one after
//     the other per path and round: the time to the first stdout output
//     and to the end of the command, and the CPU per command.
//
// Each of -rounds rounds runs every cell once, the two proxies one after
// the other in an order that alternates between rounds. The summary gives,
// per cell, the median over rounds of requests per second, latency and
// CPU per request of each process, and the ratio gateway ÷ reverse_proxy
// of the proxy process's CPU per request (median, min and max over the
// rounds). For transfers it adds MB/s, the proxy's peak RSS (VmHWM,
// reset through /proc/<pid>/clear_refs before each transfer) and the
// proxy's read and write system calls per MiB (syscr and syscw of
// /proc/<pid>/io), a count that the machine's load barely moves, and its
// sleeps and preemptions per MiB (voluntary and involuntary context
// switches of its threads).
//
// Usage (from the repository root, after make build):
//
//	go run ./hack/gatewaybench [-caddy bin/caddy] [-rounds 5] [-cell 3s]
//		[-concurrency 1,8,64] [-files 16] [-transfer-mib 1024]
//		[-transfer-rounds 3] [-commands 100] [-only listdir|port|transfer|download|command] [-profile <dir>]
//		[-gateway-env GOGC=200,...] [-gateway-only-env GOGC=400,...] [-authorizer]
//		[-memory-limit 64MiB] [-execd-bin $SANDGATE_PEERS_BIN/execd-head] [-dataplane "directive; …"]
//		[-servers "timeouts {;write_max_chunk 1MiB;}"]
//
// The baselines are the same binary with a plain reverse_proxy site and
// nginx (Debian's, installed with apt-get when missing) with proxy_pass,
// both in front of the same fixed entry; every ratio is gateway ÷ each of
// them, per round, as median and range. -execd-bin runs the real
// OpenSandbox execd (docs/real-peers.md builds it) instead of the
// stand-in, serving a temporary directory of the host.
//
// With -memory-limit each proxy runs in a memory cgroup of its own with
// that limit (cgroup v2, or v1's memory controller; root only), from a
// fresh copy of the binary whose page cache was dropped, so that the
// cgroup is charged for everything the proxy keeps resident, its own
// binary's pages included. Caddy then sets GOMEMLIMIT to 90 % of the
// limit. The kernel holds the cgroup to the limit by reclaiming cold
// binary pages, so VmRSS shows what the proxy needs resident; the
// transfers end with the cgroup's anonymous memory and the count of OOM
// kills (a proxy that did not fit would be killed and the run fail).
//
// With -authorizer the gateway also has a sandbox authorizer (authorizer
// http, docs/dataplane.md) whose endpoint is a stand-in of corectl's that
// always allows; compare a run with and one without it for the
// authorizer's cost.
//
// With -profile, one more pass after the measured rounds fetches a CPU
// profile of each proxy for every cell from Caddy's admin endpoint
// (/debug/pprof/profile) into <dir>; the profiled pass is not in the
// figures. The program exits 1 with the reason when a piece does not start
// or a request fails.
package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"mime/multipart"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/gateway/authorizer"
	"github.com/sandgate/sandgate/gateway/token"
	"github.com/sandgate/sandgate/hack/gatewayproc"
	"github.com/sandgate/sandgate/integration/execdstub"
	"github.com/sandgate/sandgate/integration/fixedentry"
	"github.com/sandgate/sandgate/internal/freeport"
)

const (
	sandboxID    = "sbxbench"
	credentialID = "cred-bench"
	keyID        = "bench"
	benchDir     = "/home/user/bench"
	transferSrc  = "/home/user/bench-download.bin"
	transferDst  = "/home/user/bench-upload.bin"
	execdPort    = 44772
	// benchPort is the sandbox port of the port workload.
	benchPort   = 3000
	benchDomain = "bench.test"
	envdPort    = "49983"
	// benchAuthzToken is the -authorizer stand-in's bearer token.
	benchAuthzToken = "gatewaybench-internal-token-0123456789abcdef"
)

type options struct {
	caddy          string
	rounds         int
	cell           time.Duration
	warmup         time.Duration
	concurrency    []int
	files          int
	transferMiB    int64
	transferRounds int
	only           string
	profileDir     string
	gatewayEnv     []string
	authorizer     bool
	commands       int
	memoryLimit    int64 // bytes; 0: no cgroup
	execdBin       string
	gatewayOnlyEnv []string
	// dataplaneDirectives are added to the gateway's e2b_dataplane
	// block, ';' between them.
	dataplaneDirectives string
	// servers is the body of a Caddyfile global "servers" block given to
	// both proxies ("" for none).
	servers string
}

// dataplaneExtra is directives (';' between them) as lines of the
// e2b_dataplane block.
func dataplaneExtra(directives string) string {
	var b strings.Builder
	for _, d := range strings.Split(directives, ";") {
		if d = strings.TrimSpace(d); d != "" {
			b.WriteString("\n\t\t" + d)
		}
	}
	return b.String()
}

func main() {
	// The stand-ins run as separate processes of this same program.
	if len(os.Args) > 2 && os.Args[1] == "-serve" {
		if err := serve(os.Args[2], os.Args[3:]); err != nil {
			fmt.Fprintln(os.Stderr, "gatewaybench stand-in:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	var conc, genv, gonly, memLimit string
	flag.StringVar(&o.caddy, "caddy", "bin/caddy", "the gateway binary (also the plain reverse proxy)")
	flag.IntVar(&o.rounds, "rounds", 5, "measured rounds of the ListDir cells")
	flag.DurationVar(&o.cell, "cell", 3*time.Second, "length of one ListDir measurement")
	flag.DurationVar(&o.warmup, "warmup", 500*time.Millisecond, "unmeasured load before each ListDir measurement")
	flag.StringVar(&conc, "concurrency", "1,8,64", "ListDir client counts")
	flag.IntVar(&o.files, "files", 16, "files in the listed directory")
	flag.Int64Var(&o.transferMiB, "transfer-mib", 1024, "size of each download and upload in MiB")
	flag.IntVar(&o.transferRounds, "transfer-rounds", 3, "measured rounds of the transfers")
	flag.StringVar(&o.only, "only", "", "run only listdir, port, transfer, download (the transfers' downloads) or command")
	flag.IntVar(&o.commands, "commands", 100, "commands per path and round of the command workload")
	flag.StringVar(&o.profileDir, "profile", "", "directory for CPU profiles of a separate, unmeasured pass")
	flag.StringVar(&genv, "gateway-env", "", "comma-separated VAR=value added to both proxies' environment (e.g. GOGC=200)")
	flag.StringVar(&gonly, "gateway-only-env", "", "comma-separated VAR=value added to the gateway's environment only (e.g. GOGC=400: the gateway's GC policy against the baselines' defaults)")
	flag.StringVar(&memLimit, "memory-limit", "", "run each proxy in a memory cgroup with this limit (e.g. 64MiB; root only)")
	flag.StringVar(&o.execdBin, "execd-bin", "", "run this OpenSandbox execd binary (e.g. $SANDGATE_PEERS_BIN/execd-head) instead of the stand-in")
	flag.StringVar(&o.servers, "servers", "", "the body of a Caddyfile global servers block given to both proxies, ';' between lines (e.g. \"timeouts {;write_max_chunk 1MiB;}\")")
	flag.StringVar(&o.dataplaneDirectives, "dataplane", "", "Caddyfile directives added to the gateway's e2b_dataplane block, ';' between them (e.g. \"max_upstream_calls_per_sandbox 64\")")
	flag.BoolVar(&o.authorizer, "authorizer", false, "give the gateway a sandbox authorizer (authorizer http) answered by a stand-in of corectl's endpoint")
	flag.Parse()
	for _, f := range strings.Split(conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "gatewaybench: bad -concurrency %q\n", conc)
			os.Exit(2)
		}
		o.concurrency = append(o.concurrency, n)
	}
	if genv != "" {
		o.gatewayEnv = strings.Split(genv, ",")
	}
	if gonly != "" {
		o.gatewayOnlyEnv = strings.Split(gonly, ",")
	}
	if memLimit != "" {
		n, err := parseSize(memLimit)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gatewaybench: -memory-limit:", err)
			os.Exit(2)
		}
		o.memoryLimit = n
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "gatewaybench:", err)
		os.Exit(1)
	}
}

// serve runs one stand-in until its standard input closes (the driver
// exited or closed it), after printing "LISTEN <addr>".
func serve(what string, args []string) error {
	fs := flag.NewFlagSet(what, flag.ContinueOnError)
	root := fs.String("root", "", "execd: the sandbox's / on the host")
	execdAddr := fs.String("execd", "", "fixedentry: the execd stand-in's address")
	portAddr := fs.String("port-server", "", "fixedentry: the address of the sandbox's server on benchPort")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var h http.Handler
	switch what {
	case "execd":
		// execd's default graceful shutdown (1 s after a command's last
		// event), which the command workload's clients do not wait for.
		s := execdstub.New(execdstub.Config{Root: *root})
		defer s.Close()
		h = s
	case "portserver":
		// A user's server in the sandbox: 64 bytes for any request.
		body := bytes.Repeat([]byte("p"), 64)
		h = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body) })
	case "authorizer":
		// corectl's GET /internal/v1/authorize, always allowed (the
		// gateway's cost is what is measured, not corectl's).
		end := time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != authorizer.Path || r.Header.Get("Authorization") != "Bearer "+benchAuthzToken {
				http.Error(w, "no", http.StatusUnauthorized)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"allowed":true,"endAt":"` + end + `"}`))
		})
	case "fixedentry":
		in := fixedentry.New()
		in.SetRecordLimit(0)
		in.SetSandbox(sandboxID, fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1", Namespace: "default",
			Ports: map[int]string{execdPort: *execdAddr, benchPort: *portAddr}})
		h = in
	default:
		return fmt.Errorf("unknown stand-in %q", what)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	fmt.Printf("LISTEN %s\n", ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return srv.Close()
}

// proc is one started process of the run.
type proc struct {
	name string
	cmd  *exec.Cmd
	// stdin is held open; closing it stops a stand-in.
	stdin  io.WriteCloser
	exited chan error
	log    string
	// cg is the proxy's memory cgroup with -memory-limit, else nil.
	cg *memoryCgroup
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) stop() {
	if p.stdin != nil {
		_ = p.stdin.Close()
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	defer func() {
		if p.cg != nil {
			p.cg.remove() // after the process ended
		}
	}()
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// startStandIn re-runs this program as stand-in what and returns it with
// its listen address.
func startStandIn(what string, args ...string) (*proc, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(self, append([]string{"-serve", what}, args...)...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	p := &proc{name: what, cmd: cmd, stdin: stdin, exited: make(chan error, 1)}
	line, err := bufio.NewReader(out).ReadString('\n')
	go func() { _, _ = io.Copy(io.Discard, out); p.exited <- cmd.Wait() }()
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "LISTEN ")
	if err != nil || !ok {
		p.stop()
		return nil, "", fmt.Errorf("the %s stand-in did not start: %q %v", what, line, err)
	}
	return p, addr, nil
}

// startCaddy runs bin/caddy with caddyfile and waits until addr listens.
func startCaddy(o options, name, dir, caddyfile, addr string) (*proc, error) {
	cf := filepath.Join(dir, name+".Caddyfile")
	if err := os.WriteFile(cf, []byte(caddyfile), 0o600); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(o.caddy, "run", "--config", cf, "--adapter", "caddyfile")
	var cg *memoryCgroup
	if o.memoryLimit > 0 {
		bin := filepath.Join(dir, name+"-caddy")
		if err := freshCopy(o.caddy, bin); err != nil {
			logf.Close()
			return nil, err
		}
		if cg, err = newMemoryCgroup(fmt.Sprintf("gatewaybench-%d-%s", os.Getpid(), name), o.memoryLimit); err != nil {
			logf.Close()
			return nil, err
		}
		// The shell joins the cgroup and execs the proxy (same PID).
		cmd = exec.Command("/bin/sh", "-c", `echo $$ > "$0" && exec "$@"`, cg.procs(),
			bin, "run", "--config", cf, "--adapter", "caddyfile")
	}
	home := filepath.Join(dir, name+"-home")
	cmd.Env = append(append(os.Environ(), "HOME="+home, "XDG_DATA_HOME="+home, "XDG_CONFIG_HOME="+home), o.gatewayEnv...)
	if name == "gateway" {
		cmd.Env = append(cmd.Env, o.gatewayOnlyEnv...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		if cg != nil {
			cg.remove()
		}
		return nil, fmt.Errorf("starting %s: %w", o.caddy, err)
	}
	p := &proc{name: name, cmd: cmd, exited: make(chan error, 1), log: logPath, cg: cg}
	go func() { p.exited <- cmd.Wait(); logf.Close() }()
	return p.awaitReady(func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, "listen")
}

// world is the running set of processes.
type world struct {
	o          options
	root       string
	execd      *proc
	fixedEntry *proc
	authz      *proc
	gateway    *proc
	proxy      *proc
	nginx      *proc
	gatewayURL string
	proxyURL   string
	nginxURL   string
	gwAdmin    string
	rpAdmin    string
	token      string
	traffic    string // the sandbox's traffic access token
	portServer *proc
	// prefix is where the sandbox's / is in the paths execd is asked
	// for: "" for the stand-in (it serves root as /), root for the real
	// execd (it serves the host's file system).
	prefix string
}

// sbx is the path execd is asked for for the sandbox's path p.
func (w *world) sbx(p string) string { return w.prefix + p }

// execdKind names the execd of the run.
func (w *world) execdKind() string {
	if w.o.execdBin != "" {
		return "real execd " + w.o.execdBin
	}
	return "stand-in"
}

func (w *world) stop() {
	for _, p := range []*proc{w.gateway, w.proxy, w.nginx, w.fixedEntry, w.execd, w.authz, w.portServer} {
		if p != nil {
			p.stop()
		}
	}
}

func run(o options) error {
	dir, err := os.MkdirTemp("", "gatewaybench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	w := &world{o: o, root: filepath.Join(dir, "sandbox")}
	defer w.stop()
	for _, d := range []string{"home/user/bench", "root", "tmp"} {
		if err := os.MkdirAll(filepath.Join(w.root, d), 0o755); err != nil {
			return err
		}
	}
	for i := range o.files {
		if err := os.WriteFile(filepath.Join(w.root, benchDir, fmt.Sprintf("file-%02d.txt", i)), []byte("benchmark\n"), 0o644); err != nil {
			return err
		}
	}

	var execdAddr, feAddr string
	if o.execdBin != "" {
		// The real execd serves the host's file system: the sandbox's
		// paths are w.root's.
		w.prefix = w.root
		w.execd, execdAddr, err = startExecd(o.execdBin, filepath.Join(dir, "execd.log"))
	} else {
		w.execd, execdAddr, err = startStandIn("execd", "-root", w.root)
	}
	if err != nil {
		return err
	}
	var portAddr string
	if w.portServer, portAddr, err = startStandIn("portserver"); err != nil {
		return err
	}
	if w.fixedEntry, feAddr, err = startStandIn("fixedentry", "-execd", execdAddr, "-port-server", portAddr); err != nil {
		return err
	}

	authzConf := ""
	if o.authorizer {
		var authzAddr string
		if w.authz, authzAddr, err = startStandIn("authorizer"); err != nil {
			return err
		}
		authzConf = "\n\t\tauthorizer http http://" + authzAddr + " {\n\t\t\theader Authorization \"Bearer {env.GATEWAYBENCH_AUTHZ_TOKEN}\"\n\t\t}"
		o.gatewayEnv = append(o.gatewayEnv, "GATEWAYBENCH_AUTHZ_TOKEN="+benchAuthzToken)
		w.o = o
	}

	keyFile := filepath.Join(dir, "token.key")
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(secret)), 0o600); err != nil {
		return err
	}
	key, err := token.LoadSigningKey(keyID, "HS256", keyFile)
	if err != nil {
		return err
	}
	if w.token, err = key.Mint(token.Target{CredentialID: credentialID, SandboxID: sandboxID, Port: 49983}, 24*time.Hour, time.Now()); err != nil {
		return err
	}
	if w.traffic, err = key.Mint(token.Target{CredentialID: credentialID, SandboxID: sandboxID, Audience: token.AudienceTraffic}, 24*time.Hour, time.Now()); err != nil {
		return err
	}
	// The credentials file in a directory of its own, as a mounted
	// Secret is: the gateway watches the file's directory, and the logs
	// written beside it (execd's, a line per request) would wake it on
	// every request, a cost no deployment has.
	credDir := filepath.Join(dir, "credentials")
	if err := os.Mkdir(credDir, 0o700); err != nil {
		return err
	}
	credFile := filepath.Join(credDir, "credentials.yaml")
	if err := os.WriteFile(credFile, []byte("credentials:\n  - {id: "+credentialID+", enabled: true, projectNamespace: bench, clusterId: cluster-a}\n"), 0o600); err != nil {
		return err
	}
	addrs := make([]string, 5)
	for i := range addrs {
		if addrs[i], err = freeport.Addr(); err != nil {
			return err
		}
	}
	w.gatewayURL, w.gwAdmin, w.proxyURL, w.rpAdmin = "http://"+addrs[0], addrs[1], "http://"+addrs[2], addrs[3]
	gwConf := fmt.Sprintf(`{
	admin %s
	auto_https off
	default_bind 127.0.0.1
	persist_config off`+serversBlock(o.servers)+`
	sandgate {
		token_key %s HS256 %s
		credentials file %s
		cluster cluster-a http://%s%s
	}
}

http://%s {
	e2b_dataplane {
		home_dir %s
		user root 0 0 /root%s
	}
}

http://*.%s:%s {
	e2b_dataplane {
		hosts %s
	}
}
`, w.gwAdmin, keyID, keyFile, credFile, feAddr, authzConf, addrs[0], w.sbx("/home/user"), dataplaneExtra(o.dataplaneDirectives), benchDomain, portOf(addrs[0]), benchDomain)
	rpConf := fmt.Sprintf(`{
	admin %s
	auto_https off
	default_bind 127.0.0.1
	persist_config off`+serversBlock(o.servers)+`
}

http://%s {
	reverse_proxy %s
}
`, w.rpAdmin, addrs[2], feAddr)
	if w.gateway, err = startCaddy(o, "gateway", dir, gwConf, addrs[0]); err != nil {
		return err
	}
	if w.proxy, err = startCaddy(o, "reverse_proxy", dir, rpConf, addrs[2]); err != nil {
		return err
	}
	w.nginxURL = "http://" + addrs[4]
	if w.nginx, err = startNginx(dir, addrs[4], feAddr); err != nil {
		return err
	}
	load1, _ := os.ReadFile("/proc/loadavg")
	// The commit the binary was built from (internal/version's stamp).
	stamp, err := exec.Command(o.caddy, "sandgate-version").Output()
	if err != nil {
		stamp = []byte("unknown (" + err.Error() + ")")
	}
	fmt.Printf("gatewaybench: %s (%s); %d CPUs (%s); authorizer %v; load average %s", o.caddy, strings.TrimSpace(string(stamp)), runtime.NumCPU(), cpuModel(), o.authorizer, load1)
	fmt.Printf("processes: gateway pid %d, reverse_proxy pid %d, nginx pid %d, fixed entry pid %d, execd pid %d (%s), client pid %d\n",
		w.gateway.pid(), w.proxy.pid(), w.nginx.pid(), w.fixedEntry.pid(), w.execd.pid(), w.execdKind(), os.Getpid())
	for _, p := range []*proc{w.gateway, w.proxy} {
		var kib [3]int64
		for i, f := range []string{"VmRSS", "RssAnon", "RssFile"} {
			if kib[i], err = statusKiB(p.pid(), f); err != nil {
				return err
			}
		}
		fmt.Printf("%s VmRSS after start: %.1f MiB (RssAnon %.1f MiB, private; RssFile %.1f MiB, the binary's pages)",
			p.name, float64(kib[0])/1024, float64(kib[1])/1024, float64(kib[2])/1024)
		if p.cg != nil {
			u, err := p.cg.usage()
			if err != nil {
				return err
			}
			fmt.Printf("; memory cgroup %.1f MiB of %.0f MiB", float64(u)/(1<<20), float64(o.memoryLimit)/(1<<20))
		}
		fmt.Println()
	}

	if o.profileDir != "" {
		if err := os.MkdirAll(o.profileDir, 0o755); err != nil {
			return err
		}
	}
	if o.only == "" || o.only == "listdir" {
		if err := w.unary(fmt.Sprintf("ListDir of %d files", w.o.files), "listdir", w.listDirRequest); err != nil {
			return err
		}
	}
	if o.only == "" || o.only == "port" {
		if err := w.unary(fmt.Sprintf("port request (GET /hello on port %d, 64-byte answer)", benchPort), "port", w.portRequest); err != nil {
			return err
		}
	}
	if o.only == "" || o.only == "transfer" || o.only == "download" {
		if err := w.transfers(); err != nil {
			return err
		}
	}
	if o.only == "" || o.only == "command" {
		if err := w.commandOutput(); err != nil {
			return err
		}
	}
	load2, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("load average at the end: %s", load2)
	return nil
}

// cpu is the CPU time of the measured processes.
type cpu struct {
	proxy, fixedEntry, execd, client time.Duration
}

func (w *world) cpuOf(proxy *proc) (cpu, error) {
	var c cpu
	var err error
	for _, x := range []struct {
		d   *time.Duration
		pid int
	}{{&c.proxy, proxy.pid()}, {&c.fixedEntry, w.fixedEntry.pid()}, {&c.execd, w.execd.pid()}, {&c.client, os.Getpid()}} {
		if *x.d, err = gatewayproc.CPUTime(x.pid); err != nil {
			return c, err
		}
	}
	return c, nil
}

func (c cpu) sub(d cpu) cpu {
	return cpu{c.proxy - d.proxy, c.fixedEntry - d.fixedEntry, c.execd - d.execd, c.client - d.client}
}

// contextSwitches returns the sums of voluntary_ctxt_switches and of
// nonvoluntary_ctxt_switches over the threads of pid now alive
// (/proc/<pid>/task/*/status): how often its threads slept (to be woken
// again) and how often they were preempted. A thread that exited takes its
// counts with it (Go's threads seldom exit); 0 when nothing can be read.
func contextSwitches(pid int) (voluntary, nonvoluntary int64) {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	for _, t := range tasks {
		data, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(data)) {
			if f, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
				v, _ := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
				voluntary += v
			} else if f, ok := strings.CutPrefix(line, "nonvoluntary_ctxt_switches:"); ok {
				v, _ := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
				nonvoluntary += v
			}
		}
	}
	return voluntary, nonvoluntary
}

// statusKiB returns a "Vm…:" field of /proc/<pid>/status in KiB.
func statusKiB(pid int, field string) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// pathSpec is one side of a comparison.
type pathSpec struct {
	name   string
	proxy  func(w *world) *proc
	admin  func(w *world) string
	client *http.Client
}

// paths are the compared proxies; nginx has no profiling endpoint (admin
// nil).
var paths = []pathSpec{
	{name: "gateway", proxy: func(w *world) *proc { return w.gateway }, admin: func(w *world) string { return w.gwAdmin }},
	{name: "reverse_proxy", proxy: func(w *world) *proc { return w.proxy }, admin: func(w *world) string { return w.rpAdmin }},
	{name: "nginx", proxy: func(w *world) *proc { return w.nginx }},
}

// baselines are the paths the gateway is divided by.
var baselines = []string{"reverse_proxy", "nginx"}

// order returns the paths in round r's order: rotating, so none always
// runs first or after the same one.
func order(r int) []pathSpec {
	out := make([]pathSpec, 0, len(paths))
	for i := range paths {
		out = append(out, paths[(i+r)%len(paths)])
	}
	if (r/len(paths))%2 == 1 {
		slices.Reverse(out)
	}
	return out
}

// pathSpecOf is the path named name.
func pathSpecOf(name string) pathSpec {
	for _, p := range paths {
		if p.name == name {
			return p
		}
	}
	panic("gatewaybench: no path " + name)
}

// serversBlock is a global "servers" block with body's lines (';'
// between them), or "" when body is empty.
func serversBlock(body string) string {
	if strings.TrimSpace(body) == "" {
		return ""
	}
	return "\n\tservers {\n\t\t" + strings.ReplaceAll(body, ";", "\n\t\t") + "\n\t}"
}

// directURL is the base URL of a plain proxy path (reverse_proxy or
// nginx), asked for execd's own URIs.
func (w *world) directURL(p string) string {
	if p == "nginx" {
		return w.nginxURL
	}
	return w.proxyURL
}

func newClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: conns + 16, MaxIdleConnsPerHost: conns + 16,
		IdleConnTimeout: 5 * time.Minute, DisableCompression: true}}
}

// listDirRequest builds path p's ListDir request.
func (w *world) listDirRequest(p string) func() *http.Request {
	switch p {
	case "gateway":
		body := []byte(`{"path":"` + w.sbx(benchDir) + `","depth":1}`)
		u := w.gatewayURL + "/filesystem.Filesystem/ListDir"
		return func() *http.Request {
			req, _ := http.NewRequest(http.MethodPost, u, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Connect-Protocol-Version", "1")
			req.Header.Set("E2b-Sandbox-Id", sandboxID)
			req.Header.Set("E2b-Sandbox-Port", envdPort)
			req.Header.Set("X-Access-Token", w.token)
			return req
		}
	default:
		u := w.directURL(p) + "/" + sandboxID + "/44772/directories/list?path=" + url.QueryEscape(w.sbx(benchDir)) + "&depth=1"
		return func() *http.Request {
			req, _ := http.NewRequest(http.MethodGet, u, nil)
			return req
		}
	}
}

// cellResult is one measured cell.
type cellResult struct {
	requests int
	wall     time.Duration
	cpu      cpu
	p50, p99 time.Duration
	// sleeps and preempts are the proxy's voluntary and involuntary
	// context switches (all its threads) during the cell: how often a
	// thread slept (to be woken again), and how often one was preempted.
	sleeps, preempts int64
	// reads and writes are the proxy's read and write system calls
	// (syscr, syscw of /proc/<pid>/io: recv and send calls included)
	// during the cell.
	reads, writes int64
}

// load runs c closed-loop clients for d and returns the request count and
// the sorted latencies.
func load(client *http.Client, newReq func() *http.Request, c int, d time.Duration) (int, []time.Duration, error) {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		all      []time.Duration
		firstErr atomic.Pointer[error]
	)
	stop := time.Now().Add(d)
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 4096)
			for time.Now().Before(stop) && firstErr.Load() == nil {
				t0 := time.Now()
				resp, err := client.Do(newReq())
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			all = append(all, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return 0, nil, *p
	}
	slices.Sort(all)
	return len(all), all, nil
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// portOf is the port of a host:port.
func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// portRequest builds path p's request to the sandbox's benchPort: by Host
// name with the traffic token through the gateway, by the fixed entry's
// URI through the reverse proxy.
func (w *world) portRequest(p string) func() *http.Request {
	switch p {
	case "gateway":
		host := fmt.Sprintf("%d-%s.%s", benchPort, sandboxID, benchDomain)
		return func() *http.Request {
			req, _ := http.NewRequest(http.MethodGet, w.gatewayURL+"/hello", nil)
			req.Host = host
			req.Header.Set("E2b-Traffic-Access-Token", w.traffic)
			return req
		}
	default:
		u := fmt.Sprintf("%s/%s/%d/hello", w.directURL(p), sandboxID, benchPort)
		return func() *http.Request {
			req, _ := http.NewRequest(http.MethodGet, u, nil)
			return req
		}
	}
}

// cell measures one closed-loop cell of path p with c clients, the
// requests built by requestOf.
func (w *world) cell(p pathSpec, c int, requestOf func(string) func() *http.Request) (cellResult, error) {
	newReq := requestOf(p.name)
	if _, _, err := load(p.client, newReq, c, w.o.warmup); err != nil {
		return cellResult{}, fmt.Errorf("%s warm-up: %w", p.name, err)
	}
	proxy := p.proxy(w)
	v0, i0 := contextSwitches(proxy.pid())
	r0, w0, _ := syscalls(proxy.pid())
	c0, err := w.cpuOf(proxy)
	if err != nil {
		return cellResult{}, err
	}
	t0 := time.Now()
	n, lat, err := load(p.client, newReq, c, w.o.cell)
	wall := time.Since(t0)
	if err != nil {
		return cellResult{}, fmt.Errorf("%s c=%d: %w", p.name, c, err)
	}
	c1, err := w.cpuOf(proxy)
	if err != nil {
		return cellResult{}, err
	}
	r1, w1, _ := syscalls(proxy.pid())
	v1, i1 := contextSwitches(proxy.pid())
	return cellResult{requests: n, wall: wall, cpu: c1.sub(c0), p50: quantile(lat, 0.5), p99: quantile(lat, 0.99),
		sleeps: v1 - v0, preempts: i1 - i0, reads: r1 - r0, writes: w1 - w0}, nil
}

// per is n per request.
func per(n int64, requests int) float64 { return float64(n) / float64(max(requests, 1)) }

func perReq(d time.Duration, n int) float64 { return float64(d.Microseconds()) / float64(max(n, 1)) }

// unary runs the closed-loop cells of one workload (what, its profile
// files' prefix, its requests) and prints its rows and summary.
func (w *world) unary(what, prefix string, requestOf func(string) func() *http.Request) error {
	load0 := loadAvg()
	fmt.Printf("\n%s: %d rounds × %v per cell (after %v warm-up), c = %v; load average %s\n", what, w.o.rounds, w.o.cell, w.o.warmup, w.o.concurrency, load0)
	clients := map[string]*http.Client{}
	for _, p := range paths {
		clients[p.name] = newClient(slices.Max(w.o.concurrency))
	}
	results := map[string]map[int][]cellResult{}
	for _, p := range paths {
		results[p.name] = map[int][]cellResult{}
	}
	for r := range w.o.rounds {
		for _, c := range w.o.concurrency {
			for _, p := range order(r) {
				p.client = clients[p.name]
				res, err := w.cell(p, c, requestOf)
				if err != nil {
					return err
				}
				results[p.name][c] = append(results[p.name][c], res)
				fmt.Printf("  round %d c=%-3d %-13s %6d req %7.0f req/s  p50 %6.2f ms  p99 %6.2f ms  CPU µs/req: proxy %6.1f  fixed entry %6.1f  execd %6.1f  client %6.1f  proxy per req: sleeps %4.2f, preempted %4.2f, reads %4.2f, writes %4.2f\n",
					r+1, c, p.name, res.requests, float64(res.requests)/res.wall.Seconds(), ms(res.p50), ms(res.p99),
					perReq(res.cpu.proxy, res.requests), perReq(res.cpu.fixedEntry, res.requests), perReq(res.cpu.execd, res.requests), perReq(res.cpu.client, res.requests),
					per(res.sleeps, res.requests), per(res.preempts, res.requests), per(res.reads, res.requests), per(res.writes, res.requests))
			}
		}
	}
	fmt.Printf("\n%s summary (median over %d rounds; CPU per request from /proc/<pid>/stat)\n\n", what, w.o.rounds)
	fmt.Println("| c | path | req/s | p50 ms | p99 ms | proxy CPU µs/req | fixed entry | execd | client | proxy sleeps/req | reads/req | writes/req |")
	fmt.Println("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, c := range w.o.concurrency {
		for _, p := range paths {
			rs := results[p.name][c]
			med := func(f func(cellResult) float64) float64 { return median(mapf(rs, f)) }
			fmt.Printf("| %d | %s | %.0f | %.2f | %.2f | %.0f | %.0f | %.0f | %.0f | %.2f | %.2f | %.2f |\n", c, p.name,
				med(func(r cellResult) float64 { return float64(r.requests) / r.wall.Seconds() }),
				med(func(r cellResult) float64 { return ms(r.p50) }), med(func(r cellResult) float64 { return ms(r.p99) }),
				med(func(r cellResult) float64 { return perReq(r.cpu.proxy, r.requests) }),
				med(func(r cellResult) float64 { return perReq(r.cpu.fixedEntry, r.requests) }),
				med(func(r cellResult) float64 { return perReq(r.cpu.execd, r.requests) }),
				med(func(r cellResult) float64 { return perReq(r.cpu.client, r.requests) }),
				med(func(r cellResult) float64 { return per(r.sleeps, r.requests) }),
				med(func(r cellResult) float64 { return per(r.reads, r.requests) }),
				med(func(r cellResult) float64 { return per(r.writes, r.requests) }))
		}
	}
	fmt.Println()
	fmt.Println("| c | gateway ÷ reverse_proxy, proxy CPU per request: median (min–max over rounds) | gateway ÷ nginx |")
	fmt.Println("|---:|---|---|")
	for _, c := range w.o.concurrency {
		fmt.Printf("| %d |", c)
		for _, b := range baselines {
			var ratios []float64
			for i := range results["gateway"][c] {
				g, rp := results["gateway"][c][i], results[b][c][i]
				ratios = append(ratios, perReq(g.cpu.proxy, g.requests)/perReq(rp.cpu.proxy, rp.requests))
			}
			fmt.Printf(" %s |", ratioFigure(ratios))
		}
		fmt.Println()
	}
	fmt.Printf("load average: %s before, %s after\n", load0, loadAvg())
	if w.o.profileDir != "" {
		fmt.Printf("\nprofiling pass (not in the figures) into %s\n", w.o.profileDir)
		for _, c := range w.o.concurrency {
			for _, p := range paths {
				if p.admin == nil {
					continue
				}
				p.client = clients[p.name]
				name := fmt.Sprintf("%s-%s-c%d.pprof", prefix, p.name, c)
				secs := max(1, int(math.Round((w.o.cell + w.o.warmup).Seconds())))
				if err := w.profiled(p, filepath.Join(w.o.profileDir, name), secs, func() error {
					_, err := w.cell(p, c, requestOf)
					return err
				}); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// profiled runs f while fetching a CPU profile of p's proxy for secs
// seconds into file.
func (w *world) profiled(p pathSpec, file string, secs int, f func() error) error {
	done := make(chan error, 1)
	go func() {
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.admin(w), secs))
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			done <- fmt.Errorf("profile of %s: HTTP %d", p.name, resp.StatusCode)
			return
		}
		out, err := os.Create(file)
		if err == nil {
			_, err = io.Copy(out, resp.Body)
			err = errors.Join(err, out.Close())
		}
		done <- err
	}()
	err := f()
	return errors.Join(err, <-done)
}

// ratioFigure is a ratio's median over the rounds with its range, as
// the tables give it: **median** (min–max).
func ratioFigure(ratios []float64) string {
	if len(ratios) == 0 {
		return "–"
	}
	return fmt.Sprintf("**%.2f** (%.2f–%.2f)", median(ratios), slices.Min(ratios), slices.Max(ratios))
}

// loadAvg is the first three fields of /proc/loadavg (1, 5 and 15
// minutes).
// cpuModel is the first "model name" of /proc/cpuinfo, or "?": the
// figures depend on it (docs/benchmarks.md "Machine"), and the machine
// these runs share has not always had the same one.
func cpuModel() string {
	data, _ := os.ReadFile("/proc/cpuinfo")
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func loadAvg() string {
	data, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func mapf[T any](s []T, f func(T) float64) []float64 {
	out := make([]float64, len(s))
	for i, v := range s {
		out[i] = f(v)
	}
	return out
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// patternBlock is the repeating content of the transfers (period 64 KiB).
var patternBlock = func() []byte {
	b := make([]byte, 64<<10)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}()

// pattern is an endless reader of patternBlock.
type pattern struct{ off int }

func (p *pattern) Read(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		c := copy(b[n:], patternBlock[p.off:])
		n += c
		p.off = (p.off + c) % len(patternBlock)
	}
	return n, nil
}

// transferResult is one measured transfer.
type transferResult struct {
	wall    time.Duration
	cpu     cpu
	peakRSS int64 // KiB; -1 when VmHWM could not be reset
	// syscr and syscw are the proxy's read and write system calls during
	// the transfer (/proc/<pid>/io): a count the machine's load barely
	// moves, unlike CPU seconds; -1 when /proc/<pid>/io is unreadable.
	syscr, syscw int64
	// sleeps and preempts are the proxy's voluntary and involuntary
	// context switches during the transfer, summed over its threads
	// (/proc/<pid>/task/*/status): how often a thread slept to be woken
	// again, and how often one was preempted.
	sleeps, preempts int64
}

// transferKind is one transfer workload on one path.
type transferKind struct {
	name   string
	path   string // "gateway", "reverse_proxy" or "nginx"
	newReq func(w *world, size int64) (*http.Request, error)
	// wantBody is the expected response body length; -1: any.
	wantBody func(size int64) int64
	upload   bool
}

// execdMultipart returns execd's upload body for dst (a metadata file part
// and a file part, docs/wire-facts.md §X1.5) as a prefix and suffix around the
// file's bytes, and the Content-Type.
func execdMultipart(dst string) (prefix, suffix []byte, contentType string) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	part, _ := mw.CreateFormFile("metadata", "metadata")
	fmt.Fprintf(part, `{"path":%q,"mode":644}`, dst)
	_, _ = mw.CreateFormFile("file", filepath.Base(dst))
	prefix = slices.Clone(b.Bytes())
	b.Reset()
	_ = mw.Close()
	return prefix, slices.Clone(b.Bytes()), mw.FormDataContentType()
}

// sdkMultipart is the E2B SDK's default write body: one "file" part whose
// filename is the target path (docs/wire-facts.md §E4.1).
func sdkMultipart(dst string) (prefix, suffix []byte, contentType string) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, dst))
	h.Set("Content-Type", "application/octet-stream")
	_, _ = mw.CreatePart(h)
	prefix = slices.Clone(b.Bytes())
	b.Reset()
	_ = mw.Close()
	return prefix, slices.Clone(b.Bytes()), mw.FormDataContentType()
}

func framed(u, contentType string, prefix, suffix []byte, size int64) (*http.Request, error) {
	body := io.MultiReader(bytes.NewReader(prefix), io.LimitReader(&pattern{}, size), bytes.NewReader(suffix))
	req, err := http.NewRequest(http.MethodPost, u, body)
	if err != nil {
		return nil, err
	}
	req.ContentLength = int64(len(prefix)) + size + int64(len(suffix))
	req.Header.Set("Content-Type", contentType)
	return req, nil
}

func (w *world) gatewayHeaders(req *http.Request) {
	req.Header.Set("E2b-Sandbox-Id", sandboxID)
	req.Header.Set("E2b-Sandbox-Port", envdPort)
	req.Header.Set("X-Access-Token", w.token)
}

var transferKinds = []transferKind{
	{name: "download", path: "gateway", wantBody: func(s int64) int64 { return s }, newReq: func(w *world, _ int64) (*http.Request, error) {
		req, err := http.NewRequest(http.MethodGet, w.gatewayURL+"/files?path="+url.QueryEscape(w.sbx(transferSrc)), nil)
		if err == nil {
			w.gatewayHeaders(req)
		}
		return req, err
	}},
	{name: "download", path: "reverse_proxy", wantBody: func(s int64) int64 { return s }, newReq: directDownload("reverse_proxy")},
	{name: "upload", path: "gateway", upload: true, wantBody: func(int64) int64 { return -1 }, newReq: func(w *world, size int64) (*http.Request, error) {
		req, err := http.NewRequest(http.MethodPost, w.gatewayURL+"/files?path="+url.QueryEscape(w.sbx(transferDst)), io.LimitReader(&pattern{}, size))
		if err == nil {
			req.ContentLength = size
			req.Header.Set("Content-Type", "application/octet-stream")
			w.gatewayHeaders(req)
		}
		return req, err
	}},
	{name: "upload (SDK multipart)", path: "gateway", upload: true, wantBody: func(int64) int64 { return -1 }, newReq: func(w *world, size int64) (*http.Request, error) {
		prefix, suffix, ct := sdkMultipart(w.sbx(transferDst))
		req, err := framed(w.gatewayURL+"/files?path="+url.QueryEscape(w.sbx(transferDst)), ct, prefix, suffix, size)
		if err == nil {
			w.gatewayHeaders(req)
		}
		return req, err
	}},
	{name: "upload", path: "reverse_proxy", upload: true, wantBody: func(int64) int64 { return -1 }, newReq: directUpload("reverse_proxy")},
	{name: "download", path: "nginx", wantBody: func(s int64) int64 { return s }, newReq: directDownload("nginx")},
	{name: "upload", path: "nginx", upload: true, wantBody: func(int64) int64 { return -1 }, newReq: directUpload("nginx")},
}

// directDownload is execd's own download through the plain proxy p.
func directDownload(p string) func(w *world, _ int64) (*http.Request, error) {
	return func(w *world, _ int64) (*http.Request, error) {
		return http.NewRequest(http.MethodGet, w.directURL(p)+"/"+sandboxID+"/44772/files/download?path="+url.QueryEscape(w.sbx(transferSrc)), nil)
	}
}

// directUpload is execd's own multipart upload through the plain proxy p.
func directUpload(p string) func(w *world, size int64) (*http.Request, error) {
	return func(w *world, size int64) (*http.Request, error) {
		prefix, suffix, ct := execdMultipart(w.sbx(transferDst))
		return framed(w.directURL(p)+"/"+sandboxID+"/44772/files/upload", ct, prefix, suffix, size)
	}
}

func (w *world) transferOnce(client *http.Client, k transferKind, size int64) (transferResult, error) {
	proxy := pathSpecOf(k.path).proxy(w)
	rssReset := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", proxy.pid()), []byte("5"), 0) == nil

	req, err := k.newReq(w, size)
	if err != nil {
		return transferResult{}, err
	}
	c0, err := w.cpuOf(proxy)
	if err != nil {
		return transferResult{}, err
	}
	r0, w0, ioErr0 := syscalls(proxy.pid())
	v0, i0 := contextSwitches(proxy.pid())
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return transferResult{}, err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	wall := time.Since(t0)
	if want := k.wantBody(size); err != nil || resp.StatusCode != http.StatusOK || (want >= 0 && n != want) {
		return transferResult{}, fmt.Errorf("%s via %s: status %d, %d body bytes (want %d), %v", k.name, k.path, resp.StatusCode, n, want, err)
	}
	c1, err := w.cpuOf(proxy)
	if err != nil {
		return transferResult{}, err
	}
	v1, i1 := contextSwitches(proxy.pid())
	res := transferResult{wall: wall, cpu: c1.sub(c0), peakRSS: -1, syscr: -1, syscw: -1, sleeps: v1 - v0, preempts: i1 - i0}
	if r1, w1, ioErr1 := syscalls(proxy.pid()); ioErr0 == nil && ioErr1 == nil {
		res.syscr, res.syscw = r1-r0, w1-w0
	}
	if rssReset {
		if res.peakRSS, err = statusKiB(proxy.pid(), "VmHWM"); err != nil {
			return res, err
		}
	}
	if k.upload {
		dst := filepath.Join(w.root, transferDst)
		fi, err := os.Stat(dst)
		if err != nil || fi.Size() != size {
			return res, fmt.Errorf("%s via %s: the uploaded file: %v (size %d, want %d)", k.name, k.path, err, sizeOf(fi), size)
		}
		if err := os.Remove(dst); err != nil {
			return res, err
		}
	}
	return res, nil
}

// syscalls returns the read and write system calls pid made so far (the
// syscr and syscw lines of /proc/<pid>/io, all its threads).
func syscalls(pid int) (r, w int64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, 0, err
	}
	r, w = -1, -1
	for line := range strings.Lines(string(data)) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ": ")
		switch k {
		case "syscr":
			r, err = strconv.ParseInt(v, 10, 64)
		case "syscw":
			w, err = strconv.ParseInt(v, 10, 64)
		}
		if err != nil {
			return 0, 0, err
		}
	}
	if r < 0 || w < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/io: no syscr or syscw", pid)
	}
	return r, w, nil
}

func sizeOf(fi os.FileInfo) int64 {
	if fi == nil {
		return -1
	}
	return fi.Size()
}

func (w *world) transfers() error {
	size := w.o.transferMiB << 20
	src := filepath.Join(w.root, transferSrc)
	f, err := os.Create(src)
	if err != nil {
		return err
	}
	defer os.Remove(src)
	if _, err := io.Copy(f, io.LimitReader(&pattern{}, size)); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	load0 := loadAvg()
	fmt.Printf("\ntransfers of %d MiB: %d rounds; load average %s\n", w.o.transferMiB, w.o.transferRounds, load0)
	client := newClient(4)
	results := make([][]transferResult, len(transferKinds))
	for r := range w.o.transferRounds {
		idx := make([]int, len(transferKinds))
		for i := range idx {
			idx[i] = i
		}
		if r%2 == 1 {
			slices.Reverse(idx)
		}
		for _, i := range idx {
			k := transferKinds[i]
			if w.o.only == "download" && k.upload {
				continue
			}
			res, err := w.transferOnce(client, k, size)
			if err != nil {
				return err
			}
			results[i] = append(results[i], res)
			gib := float64(size) / (1 << 30)
			fmt.Printf("  round %d %-22s %-13s %7.0f MB/s  CPU s/GiB: proxy %5.2f  fixed entry %5.2f  execd %5.2f  client %5.2f  proxy peak RSS %5.1f MiB  proxy per MiB: reads %6.1f writes %6.1f sleeps %6.1f preempted %5.1f",
				r+1, k.name, k.path, float64(size)/1e6/res.wall.Seconds(), res.cpu.proxy.Seconds()/gib, res.cpu.fixedEntry.Seconds()/gib,
				res.cpu.execd.Seconds()/gib, res.cpu.client.Seconds()/gib, float64(res.peakRSS)/1024,
				float64(res.syscr)/float64(w.o.transferMiB), float64(res.syscw)/float64(w.o.transferMiB),
				float64(res.sleeps)/float64(w.o.transferMiB), float64(res.preempts)/float64(w.o.transferMiB))
			fmt.Println()
		}
	}
	gib := float64(size) / (1 << 30)
	fmt.Printf("\ntransfer summary (median over %d rounds)\n\n", w.o.transferRounds)
	fmt.Println("| transfer | path | MB/s | proxy CPU s/GiB | fixed entry | execd | client | proxy peak RSS MiB (max) | proxy per MiB: reads / writes / sleeps |")
	fmt.Println("|---|---|---:|---:|---:|---:|---:|---:|---:|")
	for i, k := range transferKinds {
		rs := results[i]
		if len(rs) == 0 {
			continue
		}
		med := func(f func(transferResult) float64) float64 { return median(mapf(rs, f)) }
		fmt.Printf("| %s | %s | %.0f | %.2f | %.2f | %.2f | %.2f | %.1f | %.1f / %.1f / %.1f |\n", k.name, k.path,
			med(func(r transferResult) float64 { return float64(size) / 1e6 / r.wall.Seconds() }),
			med(func(r transferResult) float64 { return r.cpu.proxy.Seconds() / gib }),
			med(func(r transferResult) float64 { return r.cpu.fixedEntry.Seconds() / gib }),
			med(func(r transferResult) float64 { return r.cpu.execd.Seconds() / gib }),
			med(func(r transferResult) float64 { return r.cpu.client.Seconds() / gib }),
			slices.Max(mapf(rs, func(r transferResult) float64 { return float64(r.peakRSS) / 1024 })),
			med(func(r transferResult) float64 { return float64(r.syscr) / float64(w.o.transferMiB) }),
			med(func(r transferResult) float64 { return float64(r.syscw) / float64(w.o.transferMiB) }),
			med(func(r transferResult) float64 { return float64(r.sleeps) / float64(w.o.transferMiB) }))
	}
	for _, p := range []*proc{w.gateway, w.proxy, w.nginx} {
		if p.cg == nil {
			continue
		}
		kills, err := p.cg.oomKills()
		if err != nil {
			return err
		}
		anon, err := p.cg.anon()
		if err != nil {
			return err
		}
		fmt.Printf("\n%s memory cgroup (limit %.0f MiB): %d OOM kills, anonymous memory now %.1f MiB\n",
			p.name, float64(w.o.memoryLimit)/(1<<20), kills, float64(anon)/(1<<20))
	}
	fmt.Println()
	fmt.Println("| transfer | gateway ÷ reverse_proxy, proxy CPU per GiB: median (min–max over rounds) | gateway ÷ nginx |")
	fmt.Println("|---|---|---|")
	ratio := func(gi int, bi [2]int, label string) {
		fmt.Printf("| %s |", label)
		for _, ri := range bi {
			var ratios []float64
			for r := range results[gi] {
				ratios = append(ratios, results[gi][r].cpu.proxy.Seconds()/results[ri][r].cpu.proxy.Seconds())
			}
			fmt.Printf(" %s |", ratioFigure(ratios))
		}
		fmt.Println()
	}
	ratio(0, [2]int{1, 5}, "download")
	ratio(2, [2]int{4, 6}, "upload (octet-stream)")
	ratio(3, [2]int{4, 6}, "upload (SDK multipart)")
	fmt.Printf("load average: %s before, %s after\n", load0, loadAvg())
	if w.o.profileDir != "" {
		fmt.Printf("\nprofiling pass (not in the figures) into %s\n", w.o.profileDir)
		for i, k := range transferKinds {
			p := pathSpecOf(k.path)
			if p.admin == nil || len(results[i]) == 0 {
				continue
			}
			name := "transfer-" + strings.NewReplacer(" ", "-", "(", "", ")", "").Replace(k.name) + "-" + k.path + ".pprof"
			// The profile covers about the transfer's median length.
			secs := max(1, int(math.Round(median(mapf(results[i], func(r transferResult) float64 { return r.wall.Seconds() })))))
			err := w.profiled(p, filepath.Join(w.o.profileDir, name), secs, func() error {
				_, err := w.transferOnce(client, k, size)
				return err
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// benchCommand is the command of the command workload, as the SDKs send
// commands.run("echo hi"): /bin/bash -l -c <cmd>.
const benchCommand = "echo hi"

// commandTiming is one command's client-side times from the request.
type commandTiming struct {
	first, end time.Duration // first stdout output; the command's end
}

// errStreamBroken is a command stream cut after it started: the
// fixed-entry stand-in's proxy closed its upstream connection (see
// commandOutput).
var errStreamBroken = errors.New("the command stream was cut after it started")

// runCommand runs benchCommand on path p and times it.
func (w *world) runCommand(client *http.Client, p string) (commandTiming, error) {
	var req *http.Request
	var err error
	if p == "gateway" {
		msg := []byte(`{"process":{"cmd":"/bin/bash","args":["-l","-c","` + benchCommand + `"],"envs":{},"cwd":"` + w.sbx("/home/user") + `"}}`)
		env := make([]byte, 5, 5+len(msg))
		env[1], env[2], env[3], env[4] = byte(len(msg)>>24), byte(len(msg)>>16), byte(len(msg)>>8), byte(len(msg))
		req, err = http.NewRequest(http.MethodPost, w.gatewayURL+"/process.Process/Start", bytes.NewReader(append(env, msg...)))
		if err == nil {
			req.Header.Set("Content-Type", "application/connect+json")
			req.Header.Set("Connect-Protocol-Version", "1")
			w.gatewayHeaders(req)
		}
	} else {
		// uid and gid as the gateway sends them for its user root.
		body := `{"command":"/bin/bash -l -c '` + benchCommand + `'","cwd":"` + w.sbx("/home/user") + `","uid":0,"gid":0}`
		req, err = http.NewRequest(http.MethodPost, w.directURL(p)+"/"+sandboxID+"/44772/command", strings.NewReader(body))
		if err == nil {
			req.Header.Set("Content-Type", "application/json")
		}
	}
	if err != nil {
		return commandTiming{}, err
	}
	var t commandTiming
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return t, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return t, fmt.Errorf("command via %s: status %d: %s", p, resp.StatusCode, b)
	}
	br := bufio.NewReader(resp.Body)
	var seen []string // the messages so far, for an error
	for t.end == 0 {
		var msg []byte
		if p == "gateway" {
			// Connect envelopes: flags, 4-byte length, JSON.
			var hdr [5]byte
			if _, err := io.ReadFull(br, hdr[:]); err != nil {
				return t, fmt.Errorf("command via gateway: the stream ended before the end event: %w (after %q)", err, seen)
			}
			msg = make([]byte, int(hdr[1])<<24|int(hdr[2])<<16|int(hdr[3])<<8|int(hdr[4]))
			if _, err := io.ReadFull(br, msg); err != nil {
				return t, err
			}
			if hdr[0]&2 != 0 {
				if bytes.Contains(msg, []byte("execd closed the command stream before the command ended")) {
					return t, errStreamBroken
				}
				return t, fmt.Errorf("command via gateway: end of stream before the end event: %s (after %q)", msg, seen)
			}
			seen = append(seen, string(msg))
			switch {
			case t.first == 0 && bytes.Contains(msg, []byte(`"stdout"`)):
				t.first = time.Since(t0)
			case bytes.Contains(msg, []byte(`"end"`)):
				t.end = time.Since(t0)
			}
		} else {
			// execd's events: bare JSON objects, each followed by "\n\n".
			line, err := br.ReadBytes('\n')
			if err != nil {
				// Caddy relays the cut as the stand-in's last words;
				// nginx ends its chunked answer early.
				if len(seen) > 0 && (strings.HasPrefix(seen[len(seen)-1], "net/http: abort Handler") || p == "nginx") {
					return t, errStreamBroken
				}
				return t, fmt.Errorf("command via reverse_proxy: the stream ended before execution_complete: %w (after %q)", err, seen)
			}
			if len(bytes.TrimSpace(line)) > 0 {
				seen = append(seen, string(line))
			}
			switch {
			case t.first == 0 && bytes.Contains(line, []byte(`"type":"stdout"`)):
				t.first = time.Since(t0)
			case bytes.Contains(line, []byte(`"type":"execution_complete"`)):
				t.end = time.Since(t0)
			case bytes.Contains(line, []byte(`"type":"error"`)):
				return t, fmt.Errorf("command via reverse_proxy: %s", line)
			}
		}
	}
	if t.first == 0 {
		return t, fmt.Errorf("command via %s: no stdout output", p)
	}
	// As the SDKs, stop at the terminal event: execd keeps the stream
	// open for its graceful shutdown (1 s) after it.
	return t, nil
}

// commandOutput runs the command workload: rounds of -commands commands
// per path, the paths alternating. A stream the fixed entry cuts after
// it started is counted and left out of the times: the stand-in's
// httputil.ReverseProxy (as the real ingress's) closes its upstream
// connection when its transport reads the already-forwarded request body
// once more after the server closed it, which happens when execd answers
// before that read (net/http closes an unread request body when the
// response starts).
func (w *world) commandOutput() error {
	n := w.o.commands
	fmt.Printf("\ncommand output (%q, closed loop, one at a time): %d rounds × %d commands per path\n", benchCommand, w.o.rounds, n)
	clients := map[string]*http.Client{}
	for _, p := range paths {
		clients[p.name] = newClient(2)
		for range 5 { // warm-up: connections, the first shells
			if _, err := w.runCommand(clients[p.name], p.name); err != nil && !errors.Is(err, errStreamBroken) {
				return err
			}
		}
	}
	type cell struct {
		first, end []time.Duration
		broken     int
		cpu        cpu
	}
	results := map[string][]cell{}
	for r := range w.o.rounds {
		for _, p := range order(r) {
			proxy := p.proxy(w)
			c0, err := w.cpuOf(proxy)
			if err != nil {
				return err
			}
			var c cell
			for range n {
				t, err := w.runCommand(clients[p.name], p.name)
				if errors.Is(err, errStreamBroken) {
					c.broken++
					continue
				}
				if err != nil {
					return err
				}
				c.first, c.end = append(c.first, t.first), append(c.end, t.end)
			}
			c1, err := w.cpuOf(proxy)
			if err != nil {
				return err
			}
			c.cpu = c1.sub(c0)
			slices.Sort(c.first)
			slices.Sort(c.end)
			results[p.name] = append(results[p.name], c)
			fmt.Printf("  round %d %-13s first output p50 %6.2f ms p90 %6.2f ms  end p50 %6.2f ms  CPU µs/command: proxy %6.0f  fixed entry %6.0f  execd %6.0f  cut: %d\n",
				r+1, p.name, ms(quantile(c.first, 0.5)), ms(quantile(c.first, 0.9)), ms(quantile(c.end, 0.5)),
				perReq(c.cpu.proxy, n), perReq(c.cpu.fixedEntry, n), perReq(c.cpu.execd, n), c.broken)
		}
	}
	fmt.Printf("\ncommand summary (median over %d rounds of the per-round quantiles)\n\n", w.o.rounds)
	fmt.Println("| path | first output p50 ms | p90 ms | end p50 ms | proxy CPU µs/command | fixed entry | execd | streams cut (all rounds) |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, p := range paths {
		cs := results[p.name]
		med := func(f func(cell) float64) float64 { return median(mapf(cs, f)) }
		broken := 0
		for _, c := range cs {
			broken += c.broken
		}
		fmt.Printf("| %s | %.2f | %.2f | %.2f | %.0f | %.0f | %.0f | %d of %d |\n", p.name,
			med(func(c cell) float64 { return ms(quantile(c.first, 0.5)) }),
			med(func(c cell) float64 { return ms(quantile(c.first, 0.9)) }),
			med(func(c cell) float64 { return ms(quantile(c.end, 0.5)) }),
			med(func(c cell) float64 { return perReq(c.cpu.proxy, n) }),
			med(func(c cell) float64 { return perReq(c.cpu.fixedEntry, n) }),
			med(func(c cell) float64 { return perReq(c.cpu.execd, n) }), broken, n*len(cs))
	}
	var added, addedEnd []float64
	for i := range results["gateway"] {
		g, rp := results["gateway"][i], results["reverse_proxy"][i]
		added = append(added, ms(quantile(g.first, 0.5))-ms(quantile(rp.first, 0.5)))
		addedEnd = append(addedEnd, ms(quantile(g.end, 0.5))-ms(quantile(rp.end, 0.5)))
	}
	fmt.Printf("\ngateway − direct execd stream, p50 per round: first output **%+.2f ms** (%+.2f to %+.2f), end %+.2f ms (%+.2f to %+.2f)\n",
		median(added), slices.Min(added), slices.Max(added), median(addedEnd), slices.Min(addedEnd), slices.Max(addedEnd))
	return nil
}
