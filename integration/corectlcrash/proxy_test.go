package corectlcrash_test

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
)

// apiProxy is a loopback reverse proxy in front of the test apiserver for
// one corectl process: the process's kubeconfig names the proxy (plain
// HTTP, no credentials) and the proxy authenticates upstream as the
// cluster admin. Every request is offered to hold, in arrival order; a
// request hold takes is never forwarded: its handler waits until the
// process that sent it is gone (its connection closes), so the test can
// kill the process exactly there, without sleeps.
type apiProxy struct {
	srv *httptest.Server

	mu   sync.Mutex
	hold func(r *http.Request) bool
	// held receives each request hold took.
	held chan *http.Request
}

// newAPIProxy starts a proxy to the apiserver of cfg.
func newAPIProxy(t *testing.T, cfg *rest.Config) *apiProxy {
	t.Helper()
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	up, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(up) },
		Transport:     rt,
		FlushInterval: -1, // watches stream
		ErrorLog:      log.New(io.Discard, "", 0),
	}
	p := &apiProxy{held: make(chan *http.Request, 16)}
	closing := make(chan struct{})
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		take := p.hold != nil && p.hold(r)
		p.mu.Unlock()
		if take {
			// The request's context ends when its connection closes only
			// once the body has been read (net/http's background read).
			_, _ = io.Copy(io.Discard, r.Body)
			p.held <- r
			select {
			case <-r.Context().Done():
			case <-closing:
			}
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { close(closing); p.srv.Close() })
	return p
}

// setHold installs hold (nil: forward everything).
func (p *apiProxy) setHold(hold func(r *http.Request) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold = hold
}

// kubeconfig is a kubeconfig that reaches the apiserver through p.
func (p *apiProxy) kubeconfig() string {
	return "apiVersion: v1\nkind: Config\n" +
		"clusters: [{name: proxy, cluster: {server: " + p.srv.URL + "}}]\n" +
		"users: [{name: proxy, user: {}}]\n" +
		"contexts: [{name: proxy, context: {cluster: proxy, user: proxy}}]\n" +
		"current-context: proxy\n"
}
