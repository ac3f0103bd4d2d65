// Command reloadloss counts the requests a Caddy process loses while its
// configuration is reloaded: it runs CADDY with a server on 127.0.0.1
// that answers with Caddy's own static_response (no sandgate module in
// the route), has -clients goroutines each send one request at a time on a
// new connection, loads -reloads configurations one after the other
// through the admin API (each differs in the answer's body), and prints
// how many requests were answered, how many connections closed
// unanswered and how many dials failed. docs/runbook.md "Rollouts and
// draining" gives the figure and what it means for the gateway.
//
//	go run ./hack/reloadloss -caddy bin/caddy [-reloads 300] [-clients 4]
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// The loopback ports of the server and of Caddy's admin API.
const (
	serverAddr = "127.0.0.1:47018"
	adminAddr  = "127.0.0.1:47019"
)

// config is Caddy's JSON configuration number n: one server whose answer
// names n.
func config(n int) string {
	return fmt.Sprintf(`{"admin":{"listen":%q},"apps":{"http":{"servers":{"s":{"listen":[%q],"routes":[{"handle":[{"handler":"static_response","body":"ok %d"}]}]}}}}}`,
		adminAddr, serverAddr, n)
}

func main() {
	caddy := flag.String("caddy", "bin/caddy", "the Caddy binary")
	reloads := flag.Int("reloads", 300, "configurations loaded one after the other")
	clients := flag.Int("clients", 4, "goroutines sending a request at a time, each on a new connection")
	flag.Parse()
	dir, err := os.MkdirTemp("", "reloadloss")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "caddy.json")
	if err := os.WriteFile(file, []byte(config(0)), 0o600); err != nil {
		log.Fatal(err)
	}
	cmd := exec.Command(*caddy, "run", "--config", file)
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get("http://" + adminAddr + "/config/")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			log.Fatalf("Caddy's admin API did not answer within a minute: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // polling a starting process: no event to wait on
	}
	var answered, closed, dialErrors atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range *clients {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.Dial("tcp", serverAddr)
				if err != nil {
					dialErrors.Add(1)
					continue
				}
				_ = c.SetDeadline(time.Now().Add(time.Minute))
				fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: reloadloss\r\nConnection: close\r\n\r\n")
				if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
					closed.Add(1)
				} else {
					resp.Body.Close()
					answered.Add(1)
				}
				c.Close()
			}
		})
	}
	for n := 1; n <= *reloads; n++ {
		resp, err := http.Post("http://"+adminAddr+"/load", "application/json", bytes.NewBufferString(config(n)))
		if err != nil {
			log.Fatalf("reload %d: %v", n, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			log.Fatalf("reload %d: %s", n, resp.Status)
		}
	}
	close(stop)
	wg.Wait()
	fmt.Printf("%d reloads, %d clients: %d requests answered, %d connections closed unanswered, %d dials failed\n",
		*reloads, *clients, answered.Load(), closed.Load(), dialErrors.Load())
}
