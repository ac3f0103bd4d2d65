package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sandgate/sandgate/gateway/authorizer"
	"github.com/sandgate/sandgate/gateway/connect"
	"github.com/sandgate/sandgate/gateway/execd"
	"github.com/sandgate/sandgate/integration/fixedentry"
)

// fakeAuthorizer answers a fixed decision and records what it was asked.
type fakeAuthorizer struct {
	mu    sync.Mutex
	d     authorizer.Decision
	err   error
	asked [][2]string
}

func (f *fakeAuthorizer) Authorize(_ context.Context, cred, sbx string) (authorizer.Decision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, [2]string{cred, sbx})
	return f.d, f.err
}

// TestAuthorizerCheck: with an authorizer, every refusal is its stable
// code on the Connect and REST routes, nothing reaches the fixed entry,
// and the authorizer is asked with the token's credential and sandbox
// after the credential and cluster checks; an allowed answer is served.
func TestAuthorizerCheck(t *testing.T) {
	fa := &fakeAuthorizer{}
	e := newTestEnvDeps(t, func(d *Deps) { d.Authorizer = fa })
	e.writeFile("home/user/f.txt", "hello")
	for _, tc := range []struct {
		name string
		d    authorizer.Decision
		err  error
		code Code
	}{
		{"not found (missing or another credential's)", authorizer.Decision{Reason: authorizer.ReasonNotFound}, nil, CodeSandboxNotFound},
		{"deleting", authorizer.Decision{Reason: authorizer.ReasonDeleting}, nil, CodeSandboxDeleting},
		{"expired", authorizer.Decision{Reason: authorizer.ReasonExpired}, nil, CodeSandboxExpired},
		{"not ready (Creating or PodUnavailable)", authorizer.Decision{Reason: authorizer.ReasonNotReady}, nil, CodeSandboxNotReady},
		{"unavailable", authorizer.Decision{}, errors.New("corectl down"), CodeAuthorizerUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fa.mu.Lock()
			fa.d, fa.err, fa.asked = tc.d, tc.err, nil
			fa.mu.Unlock()
			e.ingress.ResetRequests()
			// Connect unary.
			resp, body := e.unary("ListDir", `{"path":"/home/user"}`)
			var ce struct{ Code, Message string }
			_ = json.Unmarshal(body, &ce)
			if resp.StatusCode != 503 || ce.Code != string(tc.code.ConnectCode()) || !strings.HasPrefix(ce.Message, string(tc.code)+": ") {
				t.Fatalf("ListDir = %d %s", resp.StatusCode, body)
			}
			if o := e.waitOutcome(); o.Code != tc.code {
				t.Fatalf("outcome %q", o.Code)
			}
			// REST.
			resp, body = e.do(e.request(http.MethodGet, "/files?path=/home/user/f.txt", nil))
			if resp.StatusCode != tc.code.RESTStatus() || resp.Header.Get("Sandgate-Error-Code") != string(tc.code) {
				t.Fatalf("files.read = %d %s %v", resp.StatusCode, body, resp.Header)
			}
			e.waitOutcome()
			if n := len(e.ingress.Requests()); n != 0 {
				t.Fatalf("%d requests reached the fixed entry", n)
			}
			fa.mu.Lock()
			defer fa.mu.Unlock()
			if len(fa.asked) != 2 || fa.asked[0] != [2]string{"cred-a", testSandbox} {
				t.Fatalf("asked %v", fa.asked)
			}
		})
	}
	// The credential is checked before the authorizer is asked.
	fa.mu.Lock()
	fa.d, fa.err, fa.asked = authorizer.Decision{Allowed: true}, nil, nil
	fa.mu.Unlock()
	req := e.request(http.MethodGet, "/files?path=/home/user/f.txt", nil)
	req.Header.Set(HeaderAccessToken, e.mint("cred-off", testSandbox))
	if resp, body := e.do(req); resp.StatusCode != 401 {
		t.Fatalf("disabled credential = %d %s", resp.StatusCode, body)
	}
	e.waitOutcome()
	// Allowed: served.
	resp, body := e.do(e.request(http.MethodGet, "/files?path=/home/user/f.txt", nil))
	if resp.StatusCode != 200 || string(body) != "hello" {
		t.Fatalf("allowed read = %d %s", resp.StatusCode, body)
	}
	e.waitOutcome()
	fa.mu.Lock()
	defer fa.mu.Unlock()
	if len(fa.asked) != 1 {
		t.Fatalf("asked %v (the disabled credential must not reach the authorizer)", fa.asked)
	}
}

// fakeRechecker is a fakeAuthorizer whose Recheck (an answer without a
// cache) may differ from its Authorize (a cached answer).
type fakeRechecker struct {
	fakeAuthorizer
	recheck    authorizer.Decision
	recheckErr error
	rechecked  int
}

func (f *fakeRechecker) Recheck(_ context.Context, cred, sbx string) (authorizer.Decision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rechecked++
	return f.recheck, f.recheckErr
}

// cutCommandUpstream is an execd whose /command stream sends init and one
// line of output, then waits: a value on the returned channel cuts it
// (true: aborted mid-body, false: ended cleanly without a terminal event).
// /ping answers 200.
func cutCommandUpstream(t *testing.T) (addr string, cut chan bool) {
	cut = make(chan bool, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/ping", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/command", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `{"type":"init","text":"0c1d0c1d0c1d4c1d8c1d0c1d0c1d0c1d"}`+"\n\n"+`{"type":"stdout","text":"working"}`+"\n\n")
		http.NewResponseController(w).Flush()
		select {
		case abort := <-cut:
			if abort {
				panic(http.ErrAbortHandler)
			}
		case <-r.Context().Done():
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), cut
}

// TestStreamCutWhenSandboxGone: a Process/Start stream that execd cuts
// after the start event (cleanly or by an abort, as when the sandbox's pod
// dies) ends with the sandbox's refusal when the authorizer (asked afresh:
// Recheck, not the cached Authorize) or the cluster's fixed entry (the
// OpenSandbox ingress stand-in, on execd's /ping) says the sandbox is gone,
// sent as unavailable (the SDKs' timeout error after the start event); a
// sandbox that is still there, or an authorizer that cannot answer, leaves
// EXECD_PROTOCOL (internal, the SDKs' generic error).
func TestStreamCutWhenSandboxGone(t *testing.T) {
	allowed := authorizer.Decision{Allowed: true}
	for _, tc := range []struct {
		name string
		// authz is the authorizer (nil: none); gone runs after the start
		// event, before the cut (the deletion).
		authz func() (authorizer.Authorizer, func())
		// removed: the ingress forgets the sandbox (the BatchSandbox is gone).
		removed bool
		code    Code
	}{
		{"rechecked refusal beats a cached allowed answer", func() (authorizer.Authorizer, func()) {
			f := &fakeRechecker{fakeAuthorizer: fakeAuthorizer{d: allowed}, recheck: authorizer.Decision{Reason: authorizer.ReasonDeleting}}
			return f, nil
		}, false, CodeSandboxDeleting},
		{"authorizer without Recheck", func() (authorizer.Authorizer, func()) {
			f := &fakeAuthorizer{d: allowed}
			return f, func() { f.mu.Lock(); f.d = authorizer.Decision{Reason: authorizer.ReasonExpired}; f.mu.Unlock() }
		}, false, CodeSandboxExpired},
		{"no authorizer, the ingress no longer knows it", nil, true, CodeSandboxNotFound},
		{"authorizer allows, the ingress no longer knows it", func() (authorizer.Authorizer, func()) {
			return &fakeRechecker{fakeAuthorizer: fakeAuthorizer{d: allowed}, recheck: allowed}, nil
		}, true, CodeSandboxNotFound},
		{"sandbox still there", func() (authorizer.Authorizer, func()) {
			return &fakeRechecker{fakeAuthorizer: fakeAuthorizer{d: allowed}, recheck: allowed}, nil
		}, false, CodeExecdProtocol},
		{"authorizer cannot answer, sandbox still routed", func() (authorizer.Authorizer, func()) {
			return &fakeRechecker{fakeAuthorizer: fakeAuthorizer{d: allowed}, recheckErr: authorizer.ErrUnavailable}, nil
		}, false, CodeExecdProtocol},
		{"no authorizer, sandbox still routed", nil, false, CodeExecdProtocol},
	} {
		for _, abort := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/abort=%v", tc.name, abort), func(t *testing.T) {
				var a authorizer.Authorizer
				var gone func()
				if tc.authz != nil {
					a, gone = tc.authz()
				}
				up, cut := cutCommandUpstream(t)
				ing := fixedentry.New()
				ing.SetSandbox(testSandbox, fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1", Ports: map[int]string{execd.DefaultPort: up}})
				feSrv := httptest.NewServer(ing)
				t.Cleanup(feSrv.Close)
				fe, _ := url.Parse(feSrv.URL)
				e := newTestEnvDeps(t, func(d *Deps) {
					d.Clusters = fakeClusters{"cluster-a": {ID: "cluster-a", FixedEntry: fe}}
					if a != nil {
						d.Authorizer = a
					}
				})
				resp, err := testClient.Do(e.startRequest(startMsg("sleep 600")))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				if f, err := readFrame(t, resp.Body); err != nil || !strings.Contains(f.raw, `"start"`) {
					t.Fatalf("first frame %+v %v, want the start event", f, err)
				}
				if gone != nil {
					gone()
				}
				if tc.removed {
					ing.RemoveSandbox(testSandbox)
				}
				cut <- abort
				rest, _ := io.ReadAll(resp.Body)
				frames := readFrames(t, rest)
				last := frames[len(frames)-1]
				msg, _ := last.json["error"].(map[string]any)["message"].(string)
				wantConnect := string(connect.Unavailable)
				if tc.code == CodeExecdProtocol {
					wantConnect = string(connect.Internal)
				}
				if last.flags != connect.FlagEndStream || last.json["error"].(map[string]any)["code"] != wantConnect ||
					!strings.HasPrefix(msg, string(tc.code)+": ") {
					t.Fatalf("end of stream %s, want %s with %s", last.raw, wantConnect, tc.code)
				}
				if o := e.waitOutcome(); o.Code != tc.code {
					t.Fatalf("outcome %q, want %q", o.Code, tc.code)
				}
				if f, ok := a.(*fakeRechecker); ok {
					f.mu.Lock()
					defer f.mu.Unlock()
					if len(f.asked) != 1 || f.rechecked != 1 {
						t.Fatalf("Authorize asked %d times, Recheck %d times; want 1 and 1", len(f.asked), f.rechecked)
					}
				}
			})
		}
	}
}

// TestFollowBrokenWhenSandboxGone: with extended operations a command's
// stream follows execd's status and output files; when the fixed entry
// stops answering (the connection closed, FIXED_ENTRY_UNREACHABLE) and the
// authorizer, asked afresh, now refuses the sandbox, the stream ends with
// that refusal; while the authorizer still allows it the network error
// stays.
func TestFollowBrokenWhenSandboxGone(t *testing.T) {
	for _, tc := range []struct {
		recheck authorizer.Decision
		code    Code
	}{
		{authorizer.Decision{Reason: authorizer.ReasonDeleting}, CodeSandboxDeleting},
		{authorizer.Decision{Allowed: true}, CodeFixedEntryUnreachable},
	} {
		t.Run(string(tc.code), func(t *testing.T) {
			fa := &fakeRechecker{fakeAuthorizer: fakeAuthorizer{d: authorizer.Decision{Allowed: true}}, recheck: tc.recheck}
			var down atomic.Bool
			var ing http.Handler
			front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if down.Load() {
					c, _, err := http.NewResponseController(w).Hijack()
					if err == nil {
						_ = c.Close() // the fixed entry no longer answers
					}
					return
				}
				ing.ServeHTTP(w, r)
			}))
			t.Cleanup(front.Close)
			fe, _ := url.Parse(front.URL)
			e := newTestEnvDeps(t, func(d *Deps) {
				d.Authorizer = fa
				d.Clusters = fakeClusters{"cluster-a": {ID: "cluster-a", FixedEntry: fe}}
			}, extended)
			ing = e.ingress
			_, r := e.openStream(context.Background(), "Start", startMsg("echo up; sleep 30"), nil)
			nextEvent(t, r, "start")
			if _, d := nextEvent(t, r, "data"); b64(t, d["stdout"]) != "up\n" {
				t.Fatalf("output %v", d)
			}
			down.Store(true)
			kind, eos := nextEvent(t, r)
			msg, _ := eos["error"].(map[string]any)["message"].(string)
			if kind != "eos" || eos["error"].(map[string]any)["code"] != string(connect.Unavailable) || !strings.HasPrefix(msg, string(tc.code)+": ") {
				t.Fatalf("end of stream %v, want unavailable with %s", eos, tc.code)
			}
			if o := e.waitOutcome(); o.Code != tc.code {
				t.Fatalf("outcome %q", o.Code)
			}
			fa.mu.Lock()
			defer fa.mu.Unlock()
			if fa.rechecked != 1 {
				t.Fatalf("Recheck asked %d times", fa.rechecked)
			}
		})
	}
}
