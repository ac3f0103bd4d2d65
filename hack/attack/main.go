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
)

type options struct {
	attack   string
	caddy    string
	nodes    int
	size     int
	duration time.Duration
	settle   time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.attack, "attack", "", "the attack: hello, response, heartbeat")
	flag.StringVar(&o.caddy, "caddy", "bin/caddy", "the gateway binary")
	flag.IntVar(&o.nodes, "nodes", 8, "hello: attacking nodes")
	flag.IntVar(&o.size, "size", 71<<20, "hello: bytes of each hello")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "heartbeat: how long to flood")
	flag.DurationVar(&o.settle, "settle", 5*time.Second, "wait after the attack before the last memory reading")
	flag.Parse()
	attacks := map[string]func(options) error{"hello": helloAttack, "response": responseAttack, "heartbeat": heartbeatAttack}
	f, ok := attacks[o.attack]
	if !ok {
		fmt.Fprintln(os.Stderr, "attack: -attack must be one of hello, response, heartbeat")
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
// credentials file) plus globals and site, where %[1]s in site is the
// port. It waits until the port listens and resets the memory peak.
func start(o options, dir, globals, site string) (*gateway, error) {
	port, err := gatewayproc.FreePort()
	if err != nil {
		return nil, err
	}
	key, creds := dir+"/hmac.key", dir+"/credentials.yaml"
	if err := os.WriteFile(key, []byte(randomHex(32)), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(creds, []byte("credentials: []\n"), 0o600); err != nil {
		return nil, err
	}
	caddyfile := fmt.Sprintf(`{
	admin off
	auto_https off
	persist_config off
	log {
		output file %s/gateway.log
		level WARN
	}
	sandgate {
		token_key k1 HS256 %s
		credentials file %s
%s
	}
}

`, dir, key, creds, globals) + fmt.Sprintf(site, port)
	p, err := gatewayproc.Start(o.caddy, dir, caddyfile, nil)
	if err != nil {
		return nil, err
	}
	if err := p.WaitListening("127.0.0.1:" + port); err != nil {
		p.Stop()
		return nil, err
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
