package corectlcrash_test

import (
	"bytes"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// apiProxy is a loopback reverse proxy in front of the test apiserver for
// one corectl process: the process's kubeconfig names the proxy (plain
// HTTP, no credentials) and the proxy authenticates upstream as the
// cluster admin. Every request is offered to hold, in arrival order; a
// request hold takes is not forwarded until the test releases it
// (heldRequest.release), and never when the process that sent it is gone
// first (its connection closes): the test can kill the process exactly
// there, or let it go on, without sleeps.
type apiProxy struct {
	srv *httptest.Server

	mu   sync.Mutex
	hold func(r *http.Request) bool
	// held receives each request hold took.
	held chan *heldRequest
}

// heldRequest is a request the proxy holds.
type heldRequest struct {
	*http.Request
	released chan struct{}
}

// release forwards the request.
func (h *heldRequest) release() { close(h.released) }

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
	p := &apiProxy{held: make(chan *heldRequest, 16)}
	closing := make(chan struct{})
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		take := p.hold != nil && p.hold(r)
		p.mu.Unlock()
		if take {
			// The request's context ends when its connection closes only
			// once the body has been read (net/http's background read);
			// a released request is forwarded with the body read here.
			body, err := io.ReadAll(r.Body)
			if err != nil {
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			h := &heldRequest{Request: r, released: make(chan struct{})}
			p.held <- h
			select {
			case <-r.Context().Done():
				return
			case <-closing:
				return
			case <-h.released:
			}
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

// awaitHeld waits up to 30 s for the next request p holds and returns
// it. It fails the test when answered delivers first (the operation the
// test sent finished without reaching the held request) or the wait
// ends; what names the held step in the failure.
func awaitHeld[T any](t *testing.T, p *apiProxy, answered <-chan T, what string) *heldRequest {
	t.Helper()
	select {
	case h := <-p.held:
		return h
	case a := <-answered:
		t.Fatalf("answered before %s: %+v", what, a)
	case <-time.After(30 * time.Second):
		t.Fatalf("never reached %s", what)
	}
	return nil
}

// writeThenRead is a hold that takes the read-back of a write: the first
// GET of path after a PUT of it (the PUT itself goes through).
func writeThenRead(path string) func(*http.Request) bool {
	wrote := false // the proxy calls a hold under p.mu, one request at a time
	return func(r *http.Request) bool {
		if r.URL.Path != path {
			return false
		}
		if r.Method == http.MethodPut {
			wrote = true
			return false
		}
		return wrote && r.Method == http.MethodGet
	}
}

// kubeconfig is a kubeconfig that reaches the apiserver through p.
func (p *apiProxy) kubeconfig() string {
	return "apiVersion: v1\nkind: Config\n" +
		"clusters: [{name: proxy, cluster: {server: " + p.srv.URL + "}}]\n" +
		"users: [{name: proxy, user: {}}]\n" +
		"contexts: [{name: proxy, context: {cluster: proxy, user: proxy}}]\n" +
		"current-context: proxy\n"
}
