package lifecycle_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/sandgate/sandgate/corectl/browser"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/integration/fixedentry"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// novncPage is a noVNC-style page: it opens a WebSocket to "websockify"
// beside itself (as noVNC's vnc.html does), sends a message and shows the
// answer in #status.
const novncPage = `<!doctype html>
<html><head><title>noVNC-style</title></head><body>
<div id="status">connecting</div>
<script>
const status = document.getElementById("status");
const ws = new WebSocket(new URL("websockify", location.href).href.replace(/^http/, "ws"));
ws.onopen = () => ws.send("ping from the page");
ws.onmessage = (e) => { status.textContent = "round trip: " + e.data; };
ws.onerror = () => { status.textContent = "websocket error"; };
</script></body></html>`

// chromium returns the Chromium binary: $SANDGATE_CHROMIUM, or chromium on
// the PATH (hack/browser/chromium.sh installs Debian's).
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SANDGATE_CHROMIUM"); p != "" {
		return p
	}
	p, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("no chromium on the PATH (%v): run bash hack/browser/chromium.sh, or set SANDGATE_CHROMIUM", err)
	}
	return p
}

// TestChromiumLoadsNoVNCThroughProjection is a real browser on both
// paths of spec §4.4. Headless Chromium (driven by the DevTools protocol)
// opens the noVNC-style page a server in the sandbox serves on 6080:
//
//   - through the generic projection, at the URL a browser uses in a
//     cluster whose Ingresses carry a host
//     (http://<host>:<fixed entry port>/<id>/6080/vnc.html, the host
//     mapped to the fixed entry as DNS would), the fixed-entry stand-in
//     and the OpenSandbox ingress in URI mode;
//   - through the Native route's answer (/sandbox/<id>/vnc.html), the
//     stand-in's ingress-nginx routing by the sb-<id> objects the binder
//     wrote to the real apiserver: the Ingress's path and Service backend,
//     the Service's port, the EndpointSlice's address (the pod IP, mapped
//     to the server's loopback address as the cluster network would).
//
// Each time the page opens its WebSocket back through the same path and
// shows the round trip, which the test reads from the page.
func TestChromiumLoadsNoVNCThroughProjection(t *testing.T) {
	bin := chromium(t)
	ctx := context.Background()
	w := start(t)
	// websockify does not check Origin (the page's origin is the fixed
	// entry's host, the Host upstream is the pod's address).
	up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
	page := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/vnc.html"):
			rw.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = rw.Write([]byte(novncPage))
		case strings.HasSuffix(r.URL.Path, "/websockify"):
			c, err := up.Upgrade(rw, r, nil)
			if err != nil {
				return
			}
			defer c.Close()
			_, m, err := c.ReadMessage()
			if err != nil {
				return
			}
			_ = c.WriteMessage(websocket.TextMessage, []byte("pong to "+string(m)+" at "+r.URL.Path))
		default:
			http.NotFound(rw, r)
		}
	}))
	t.Cleanup(page.Close)
	pageAddr := strings.TrimPrefix(page.URL, "http://")
	w.mu.Lock()
	w.ports = map[int]string{lifecycle.NoVNCPort: pageAddr}
	w.mu.Unlock()
	id := w.create(`{"templateID":"base"}`).SandboxID
	u, alloc := allocationOf(t, w.nsA, id)
	const podIP = "10.244.9.1"
	runningPod(t, u, id+"-browser", alloc, podIP)

	// ingress-nginx: rules by Host and path from the Ingresses in the
	// ingress namespace; an sb-* rule goes to its Service's EndpointSlice.
	w.entry.SetNginx(&fixedentry.Nginx{Host: w.cluster.Ingress.Host, Route: w.nginxRoute,
		Upstream: func(rt fixedentry.NginxRoute) (string, bool) {
			if !strings.HasPrefix(rt.Service, "sb-") {
				return "", false
			}
			svc := &corev1.Service{}
			if err := get(svc, rt.Namespace, rt.Service); err != nil || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != rt.ServicePort {
				return "", false
			}
			var list discoveryv1.EndpointSliceList
			if err := env.Client.List(ctx, &list, client.InNamespace(rt.Namespace),
				client.MatchingLabels{discoveryv1.LabelServiceName: rt.Service}); err != nil {
				return "", false
			}
			for _, sl := range list.Items {
				for _, e := range sl.Endpoints {
					for _, p := range sl.Ports {
						// The cluster network: the pod's IP and port reach
						// the page server.
						if len(e.Addresses) > 0 && e.Addresses[0] == podIP && p.Port != nil && *p.Port == rt.ServicePort {
							return pageAddr, true
						}
					}
				}
			}
			return "", false
		}})

	var ep lifecycle.Endpoint
	if code, raw := w.do("GET", "/sandboxes/"+id+"/endpoints?port=6080", "key-a", "", &ep); code != 200 || ep.Host == "" {
		t.Fatalf("endpoint = %d %s", code, raw)
	}
	var nb browser.Binding
	if code, raw := w.do("GET", "/api/v1/sandbox/instances/"+id+"/endpoint?port=6080", "key-a", "", &nb); code != 200 || nb.Host != ep.Host {
		t.Fatalf("native endpoint = %d %s", code, raw)
	}
	// The URL a browser opens: the host form of each answer.
	hostForm := func(raw string) string {
		t.Helper()
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(u.Host)
		u.Host = ep.Host + ":" + port
		return u.String()
	}
	b := startChromium(t, bin, ep.Host)

	generic := hostForm(ep.URL + "vnc.html")
	if got, want := b.show(generic), "round trip: pong to ping from the page at /websockify"; got != want {
		t.Fatalf("the page at %s shows %q, want %q", generic, got, want)
	}
	native := hostForm(nb.URL)
	if got, want := b.show(native), "round trip: pong to ping from the page at /sandbox/"+id+"/websockify"; got != want {
		t.Fatalf("the page at %s shows %q, want %q", native, got, want)
	}

	// What reached the fixed entry, with the projection's Host.
	var got []string
	for _, r := range w.entry.Requests() {
		// A tunnelled upgrade records no final status: its 101 is
		// informational to the recorder.
		got = append(got, fmt.Sprintf("%s %s %d %s", r.Host, r.Path, r.Status, r.Header.Get("Upgrade")))
	}
	entry, err := url.Parse(hostForm(ep.URL))
	if err != nil {
		t.Fatal(err)
	}
	host := entry.Host
	for _, want := range []string{
		host + " /" + id + "/6080/vnc.html 200 ", host + " /" + id + "/6080/websockify 0 websocket",
		host + " /sandbox/" + id + "/vnc.html 200 ", host + " /sandbox/" + id + "/websockify 0 websocket",
	} {
		if !slices.Contains(got, want) {
			t.Fatalf("the fixed entry did not see %q: %v", want, got)
		}
	}
}

// headless is a running headless Chromium and its DevTools endpoint.
type headless struct {
	t        *testing.T
	devtools string
	stderr   *strings.Builder
}

// startChromium starts bin headless, its DevTools on a loopback port it
// picks, with host resolved to 127.0.0.1.
func startChromium(t *testing.T, bin, host string) *headless {
	t.Helper()
	profile := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "--user-data-dir="+profile,
		"--host-resolver-rules=MAP "+host+" 127.0.0.1", "about:blank")
	h := &headless{t: t, stderr: &strings.Builder{}}
	cmd.Stderr = h.stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	kubetest.Eventually(t, 60*time.Second, "Chromium writes DevToolsActivePort", func() (bool, error) {
		f, err := os.Open(filepath.Join(profile, "DevToolsActivePort"))
		if err != nil {
			return false, nil
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		if !sc.Scan() || sc.Text() == "" {
			return false, nil
		}
		h.devtools = "127.0.0.1:" + sc.Text()
		return true, nil
	})
	return h
}

// show opens pageURL in a new tab and returns what its #status shows once
// the page has finished its round trip (or failed it).
func (h *headless) show(pageURL string) string {
	t := h.t
	t.Helper()
	req, _ := http.NewRequest("PUT", "http://"+h.devtools+"/json/new?"+pageURL, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%v\n%s", err, h.stderr.String())
	}
	var target struct {
		WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
	}
	err = json.NewDecoder(resp.Body).Decode(&target)
	resp.Body.Close()
	if err != nil || target.WebSocketDebuggerURL == "" {
		t.Fatalf("json/new: %v %+v", err, target)
	}
	cdp, _, err := websocket.DefaultDialer.Dial(target.WebSocketDebuggerURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cdp.Close()
	seq := 0
	evaluate := func(expr string) (string, error) {
		seq++
		if err := cdp.WriteJSON(map[string]any{"id": seq, "method": "Runtime.evaluate",
			"params": map[string]any{"expression": expr, "returnByValue": true}}); err != nil {
			return "", err
		}
		for {
			var m struct {
				ID     int `json:"id"`
				Result struct {
					Result struct {
						Value any `json:"value"`
					} `json:"result"`
				} `json:"result"`
			}
			if err := cdp.ReadJSON(&m); err != nil {
				return "", err
			}
			if m.ID == seq {
				return fmt.Sprint(m.Result.Result.Value), nil
			}
		}
	}
	var shown string
	kubetest.Eventually(t, 60*time.Second, "the page at "+pageURL+" shows its WebSocket round trip", func() (bool, error) {
		s, err := evaluate(`(document.getElementById("status") || {}).textContent || ""`)
		shown = s
		return err == nil && (strings.HasPrefix(s, "round trip: ") || s == "websocket error"), err
	})
	return shown
}
