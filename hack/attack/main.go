// Command attack runs one attack against the built gateway (bin/caddy) as
// a separate process and reports what it cost the gateway, measured from
// outside through /proc: resident memory before, at its peak (the kernel's
// high-water mark, reset just before the attack) and after, and CPU time.
// The figures of docs/node-connect.md and docs/benchmarks.md come from it.
//
// Usage:
//
//	go run ./hack/attack -attack <name> [-caddy bin/caddy] [flags]
//
// Attacks:
//
//	hello      -nodes 8 -size 71MiB: enrolled nodes each send one hello of
//	           -size bytes at once (issue 12 item 1)
//	response   -nodes 8 -size 71MiB: enrolled nodes each answer one
//	           pending info request (sent through the internal API) with
//	           a response of -size bytes at once: the large frames the
//	           gateway must accept
//	heartbeat  -duration 10s: one node sends heartbeats back to back
//	           (issue 12 item 8)
//	pong       -duration 10s: one node sends unsolicited WebSocket pongs
//	           back to back
//	gzip       -size 1GiB: one files.write whose gzip body (about 1 MiB)
//	           decompresses to -size bytes of zeros, through the fixed
//	           entry and execd stand-ins of integration/harness (issue 12
//	           item 4); the gateway is <root>/bin/caddy of -caddy's root
//	credentials -format yaml|json -count N -reloads 10: the resource
//	           credential file (by default 15 MiB of credentials) is replaced
//	           -reloads times, each re-read by the gateway (issue 12
//	           item 5)
//
// It exits 1 with the reason when the gateway does not start or the
// attack cannot be run; the gateway defending itself is not an error.
package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/sandgate/sandgate/hack/gatewayproc"
	"github.com/sandgate/sandgate/internal/freeport"
)

type options struct {
	attack   string
	caddy    string
	nodes    int
	size     int
	duration time.Duration
	settle   time.Duration
	format   string
	count    int
	reloads  int
}

func main() {
	var o options
	flag.StringVar(&o.attack, "attack", "", "the attack: hello, response, heartbeat, pong, credentials, gzip")
	flag.StringVar(&o.caddy, "caddy", "bin/caddy", "the gateway binary")
	flag.IntVar(&o.nodes, "nodes", 8, "hello: attacking nodes")
	flag.IntVar(&o.size, "size", 0, "hello, response: bytes of each frame (default 71 MiB); gzip: decompressed bytes (default 1 GiB)")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "heartbeat, pong: how long to flood")
	flag.DurationVar(&o.settle, "settle", 5*time.Second, "wait after the attack before the last memory reading")
	flag.StringVar(&o.format, "format", "yaml", "credentials: file format, yaml or json")
	flag.IntVar(&o.count, "count", 0, "credentials: credentials in the file (default: as many as make 15 MiB)")
	flag.IntVar(&o.reloads, "reloads", 10, "credentials: how many times the file is replaced")
	flag.Parse()
	attacks := map[string]func(options) error{"hello": helloAttack, "response": responseAttack, "heartbeat": heartbeatAttack, "pong": pongAttack,
		"credentials": credentialsAttack, "gzip": gzipAttack}
	if o.size == 0 {
		o.size = 71 << 20
		if o.attack == "gzip" {
			o.size = 1 << 30
		}
	}
	f, ok := attacks[o.attack]
	if !ok {
		fmt.Fprintln(os.Stderr, "attack: -attack must be one of hello, response, heartbeat, pong, credentials, gzip")
		os.Exit(2)
	}
	if err := f(o); err != nil {
		fmt.Fprintln(os.Stderr, "attack:", err)
		os.Exit(1)
	}
}

// gateway is a started gateway and its files.
type gateway struct {
	*gatewayproc.Process
	dir  string
	port string
}

// start runs o.caddy with the sandgate app (a dummy data-plane key and
// an empty credentials file) plus globals and site, where %s in site is
// the port, logging warnings and errors to dir/gateway.log. It waits until
// the port listens.
func start(o options, dir, globals, site string) (*gateway, error) {
	creds := dir + "/credentials.yaml"
	if err := os.WriteFile(creds, []byte("credentials: []\n"), 0o600); err != nil {
		return nil, err
	}
	return startWith(o, dir, "WARN", "\t\tcredentials file "+creds+"\n"+globals, site)
}

// startWith is start with the log level and the sandgate app's
// credentials (and other settings) in globals.
func startWith(o options, dir, level, globals, site string) (*gateway, error) {
	port, err := freeport.Port()
	if err != nil {
		return nil, err
	}
	key := dir + "/hmac.key"
	if err := os.WriteFile(key, []byte(randomHex(32)), 0o600); err != nil {
		return nil, err
	}
	caddyfile := fmt.Sprintf(`{
	admin off
	auto_https off
	default_bind 127.0.0.1
	persist_config off
	log {
		output file %s/gateway.log
		level %s
	}
	sandgate {
		token_key k1 HS256 %s
%s
	}
}

`, dir, level, key, globals) + fmt.Sprintf(site, port)
	out, err := os.Create(dir + "/gateway.out")
	if err != nil {
		return nil, err
	}
	defer out.Close() // the child has its own descriptor
	p, err := gatewayproc.Start(o.caddy, dir, caddyfile, out)
	if err != nil {
		return nil, err
	}
	if err := p.WaitListening("127.0.0.1:" + port); err != nil {
		p.Stop()
		tail, _ := os.ReadFile(dir + "/gateway.out")
		log, _ := os.ReadFile(dir + "/gateway.log")
		return nil, fmt.Errorf("%w; gateway output:\n%s%s", err, tail, log)
	}
	return &gateway{Process: p, dir: dir, port: port}, nil
}

// memory is one reading of the gateway's memory, in MiB.
type memory struct{ rss, peak float64 }

func (g *gateway) memory() memory {
	rss, peak, err := g.Memory()
	if err != nil {
		fmt.Fprintln(os.Stderr, "attack: reading the gateway's memory:", err)
	}
	return memory{float64(rss) / 1024, float64(peak) / 1024}
}

// report prints the memory before, the peak during and the RSS after the
// attack, then again after o.settle.
func (g *gateway) report(o options, before memory) {
	after := g.memory()
	fmt.Printf("gateway VmRSS before the attack %.0f MiB; peak during it (VmHWM) %.0f MiB (+%.0f MiB); VmRSS after %.0f MiB\n",
		before.rss, after.peak, after.peak-before.rss, after.rss)
	time.Sleep(o.settle) // the time after the attack the last reading is about
	fmt.Printf("gateway VmRSS %s later: %.0f MiB\n", o.settle, g.memory().rss)
}

func describe(o options) {
	fmt.Printf("attack %s against %s; %d CPUs, %s\n", o.attack, o.caddy, runtime.NumCPU(), runtime.Version())
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func sum(s string) string {
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:])
}

func mib(n int) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
