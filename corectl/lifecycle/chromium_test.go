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
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/integration/fixedentry"
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

// TestChromiumLoadsNoVNCThroughProjection is a real browser on the
// generic projection: headless Chromium (driven by the DevTools protocol)
// opens the noVNC-style page a server in the sandbox serves on 6080, at
// the URL a browser uses in a cluster whose Ingresses carry a host
// (http://<host>:<fixed entry port>/<id>/6080/vnc.html, the host mapped
// to the fixed entry as DNS would), through the fixed-entry stand-in; the
// page opens its WebSocket back through the same path and shows the
// round trip, which the test reads from the page.
func TestChromiumLoadsNoVNCThroughProjection(t *testing.T) {
	bin := chromium(t)
	w := start(t)
	// websockify does not check Origin (the page's origin is the fixed
	// entry's host, the Host upstream is the pod's address).
	up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
	page := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/vnc.html":
			rw.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = rw.Write([]byte(novncPage))
		case "/websockify":
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
	w.mu.Lock()
	w.ports = map[int]string{lifecycle.NoVNCPort: strings.TrimPrefix(page.URL, "http://")}
	w.mu.Unlock()
	id := w.create(`{"templateID":"base"}`).SandboxID
	w.entry.SetNginx(&fixedentry.Nginx{Host: w.cluster.Ingress.Host, Route: w.nginxRoute})

	var ep lifecycle.Endpoint
	if code, raw := w.do("GET", "/sandboxes/"+id+"/endpoints?port=6080", "key-a", "", &ep); code != 200 || ep.Host == "" {
		t.Fatalf("endpoint = %d %s", code, raw)
	}
	base, err := url.Parse(ep.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, entryPort, _ := net.SplitHostPort(base.Host)
	pageURL := "http://" + ep.Host + ":" + entryPort + base.Path + "vnc.html"

	// Chromium, its DevTools on a loopback port it picks.
	profile := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "--user-data-dir="+profile,
		"--host-resolver-rules=MAP "+ep.Host+" 127.0.0.1", "about:blank")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	var devtools string
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
		devtools = "127.0.0.1:" + sc.Text()
		return true, nil
	})

	// A new tab on the page, and its DevTools WebSocket.
	req, _ := http.NewRequest("PUT", "http://"+devtools+"/json/new?"+pageURL, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
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
	kubetest.Eventually(t, 60*time.Second, "the page shows its WebSocket round trip", func() (bool, error) {
		s, err := evaluate(`(document.getElementById("status") || {}).textContent || ""`)
		shown = s
		return err == nil && (strings.HasPrefix(s, "round trip: ") || s == "websocket error"), err
	})
	if want := "round trip: pong to ping from the page at /websockify"; shown != want {
		t.Fatalf("the page shows %q, want %q", shown, want)
	}
	// Both went through the fixed entry with the projection's Host.
	var got []string
	for _, r := range w.entry.Requests() {
		if r.SandboxID == id && r.Port == lifecycle.NoVNCPort {
			// A tunnelled upgrade records no final status: its 101 is
			// informational to the recorder.
			got = append(got, fmt.Sprintf("%s %s %d %s", r.Host, r.Path, r.Status, r.Header.Get("Upgrade")))
		}
	}
	host := ep.Host + ":" + entryPort
	if !slices.Contains(got, host+" /"+id+"/6080/vnc.html 200 ") || !slices.Contains(got, host+" /"+id+"/6080/websockify 0 websocket") {
		t.Fatalf("the fixed entry saw %v", got)
	}
}
