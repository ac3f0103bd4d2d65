package entryprobe

import (
	"context"
	"crypto/sha256"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// dnsServer answers every A question with addrs, as the cluster DNS
// answers for a headless Service (one address per ready pod).
func dnsServer(t *testing.T, addrs ...[4]byte) string {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true})
			_ = b.StartQuestions()
			_ = b.Question(q)
			_ = b.StartAnswers()
			if q.Type == dnsmessage.TypeA {
				for _, a := range addrs {
					_ = b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 5}, dnsmessage.AResource{A: a})
				}
			}
			out, err := b.Finish()
			if err == nil {
				_, _ = pc.WriteTo(out, from)
			}
		}
	}()
	return pc.LocalAddr().String()
}

// TestClientSpreadsOverReplicas: a relay URL whose host is a name (the
// headless Service gateway-probe-relay) is resolved on every request and
// the requests go round-robin over its addresses, so a discovery's dials
// reach every gateway replica; the Host header stays the URL's.
func TestClientSpreadsOverReplicas(t *testing.T) {
	e := newEntry(t)
	var hits [2]atomic.Int32
	var hosts atomic.Value
	port := ""
	for i, ip := range []string{"127.0.0.1", "127.0.0.2"} {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, strings.TrimPrefix(port, ":")))
		if err != nil {
			t.Fatal(err)
		}
		if port == "" {
			port = ":" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
		}
		h := &Handler{
			Tokens: [][sha256.Size]byte{sha256.Sum256([]byte(relayToken))},
			Targets: func() map[string]Target {
				return map[string]Target{"cluster-a": {FixedEntry: e.fixed, Host: "sandbox.a.example"}}
			},
			Transport: func() http.RoundTripper { return http.DefaultTransport },
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits[i].Add(1)
			hosts.Store(r.Host)
			h.ServeHTTP(w, r)
		})}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { srv.Close() })
	}
	dns := dnsServer(t, [4]byte{127, 0, 0, 1}, [4]byte{127, 0, 0, 2})
	c := &Client{URL: "http://gateway-probe-relay.sandgate.test" + port, Token: relayToken,
		Resolver: &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "udp", dns)
		}}}
	for range 6 {
		if _, err := c.Probe(context.Background(), "cluster-a", EchoPathPrefix+strings.Repeat("0a", 16)); err != nil {
			t.Fatal(err)
		}
	}
	if hits[0].Load() != 3 || hits[1].Load() != 3 {
		t.Fatalf("the two replicas got %d and %d of 6 probes, want 3 each", hits[0].Load(), hits[1].Load())
	}
	if h := hosts.Load(); h != "gateway-probe-relay.sandgate.test"+port {
		t.Fatalf("the relay saw Host %v", h)
	}
}
