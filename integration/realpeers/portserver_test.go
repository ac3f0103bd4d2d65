package realpeers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// envPortServer, when set, makes the test binary the sandbox's business
// port helper instead of running tests: it serves the comma-separated
// ports it names on every address of the test's network namespace, whose
// only interface is its loopback (so on every Pod IP and nowhere
// outside), as a user's program in the sandbox would.
const envPortServer = "SANDGATE_REALPEERS_PORTS"

// echoed is what the port helper answers a plain HTTP request with
// (JSON): the port it was reached on, the local address the connection
// came in on (the Pod IP the Ingress dialled) and the request as it
// arrived.
type echoed struct {
	Port    int                 `json:"port"`
	Local   string              `json:"local"`
	Method  string              `json:"method"`
	Path    string              `json:"path"`
	Query   string              `json:"query"`
	Host    string              `json:"host"`
	Headers map[string][]string `json:"headers"`
	Body    string              `json:"body"`
}

// wsSubprotocol is the WebSocket subprotocol the port helper accepts.
const wsSubprotocol = "sandgate.test"

// request is r as the port helper on port saw it, with body.
func request(r *http.Request, port int, body string) echoed {
	local := ""
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		local = a.String()
	}
	return echoed{Port: port, Local: local, Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Host: r.Host,
		Headers: r.Header, Body: body}
}

// servePorts is the port helper's main: it listens on ports, prints
// "ready" once all listen, and serves until it is killed. Each port
// answers:
//   - /ws: a WebSocket (subprotocol wsSubprotocol offered) that answers
//     each message with "echo <message>", except "seen?", which it answers
//     with the upgrade request as it arrived (echoed, JSON); the
//     handshake answer carries X-Sandbox-Port;
//   - with the query parameter "cookie", the answer (a WebSocket's 101
//     too) carries portCookies, cookies for the whole test domain;
//   - /hello: "<method> <path> <query> <body> tokens=<n>", the line the
//     JS SDK's "domain" scenario expects (n: the length of the
//     X-Access-Token and E2b-Traffic-Access-Token headers, which the
//     gateway must never forward);
//   - anything else: echoed as JSON (bodies read up to 64 KiB).
func servePorts(ports string) int {
	// The WebSocket side offers one subprotocol, so the handshake's
	// negotiation through the Ingress shows.
	up := websocket.Upgrader{Subprotocols: []string{wsSubprotocol}}
	var lns []net.Listener
	for _, p := range strings.Split(ports, ",") {
		port, err := strconv.Atoi(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, "port helper:", err)
			return 2
		}
		ln, err := net.Listen("tcp", ":"+p)
		if err != nil {
			fmt.Fprintln(os.Stderr, "port helper:", err)
			return 2
		}
		lns = append(lns, ln)
		srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/ws":
				seen := request(r, port, "")
				h := http.Header{"X-Sandbox-Port": {strconv.Itoa(port)}}
				if r.URL.Query().Has("cookie") {
					h["Set-Cookie"] = portCookies
				}
				c, err := up.Upgrade(w, r, h)
				if err != nil {
					return
				}
				defer c.Close()
				for {
					mt, m, err := c.ReadMessage()
					if err != nil {
						return
					}
					if string(m) == "seen?" {
						m, _ = json.Marshal(seen)
					} else {
						m = append([]byte("echo "), m...)
					}
					if c.WriteMessage(mt, m) != nil {
						return
					}
				}
			case "/cookie":
				w.Header()["Set-Cookie"] = portCookies
				_, _ = io.WriteString(w, "cookies")
			case "/hello":
				b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
				tokens := r.Header.Get("X-Access-Token") + r.Header.Get("E2b-Traffic-Access-Token")
				_, _ = fmt.Fprintf(w, "%s %s %s %s tokens=%d", r.Method, r.URL.Path, r.URL.RawQuery, b, len(tokens))
			default:
				b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(request(r, port, string(b)))
			}
		})}
		go func() { _ = srv.Serve(ln) }()
	}
	fmt.Println("ready")
	select {}
}

// portCookies are the Set-Cookie fields the port helper answers with when
// asked to (the query parameter "cookie", or /cookie): cookies for the
// whole test domain, as a hostile tenant's server would set them.
var portCookies = []string{"wide=1; Domain=" + testDomain + "; Path=/", "own=2; Path=/"}

// businessPorts are the ports the helper serves: noVNC, Chrome's DevTools
// protocol and a custom one (the JS "domain" scenario's getHost port too).
var businessPorts = []int{6080, 9222, 18080}

// startPortServer runs this test binary as the port helper on
// businessPorts, waits until each port answers on probeIP and stops it
// when t ends.
func (w *world) startPortServer(t *testing.T) {
	t.Helper()
	var list []string
	for _, p := range businessPorts {
		list = append(list, strconv.Itoa(p))
	}
	p, err := w.start("ports", os.Args[0], []string{envPortServer + "=" + strings.Join(list, ",")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, port := range list {
		if err := poll(ctx, "the port helper on "+probeIP+":"+port, func() error {
			if err := p.exited(); err != nil {
				return err
			}
			c, err := net.DialTimeout("tcp", probeIP+":"+port, time.Second)
			if err == nil {
				c.Close()
			}
			return err
		}); err != nil {
			t.Fatal(w.withLogs(err))
		}
	}
}
