package dataplane

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/sandgate/sandgate/gateway/execd"
	"github.com/sandgate/sandgate/gateway/upstream"
)

// ownClient returns an execd client whose downloads go through the data
// plane's own HTTP/1.1 client, as in the gateway.
func ownClient(t *testing.T) *execd.Client {
	t.Helper()
	u, err := upstream.New(upstream.Config{Fallback: http.DefaultTransport})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.CloseIdleConnections)
	return &execd.Client{Stream: u}
}

// TestFilesReadOwnClient reads files through the real stand-ins with the
// downloads on the own client, whose bodies hand the ResponseWriter the
// upstream connection (splice): whole, a range, a missing file and a
// directory keep their answers.
func TestFilesReadOwnClient(t *testing.T) {
	c := ownClient(t)
	e := newTestEnvDeps(t, func(d *Deps) { d.Execd = c })
	big := bytes.Repeat([]byte("0123456789abcdef"), 3<<16) // 3 MiB
	e.writeFile("/home/user/big.bin", string(big))
	for i := range 2 {
		resp, body := e.do(e.request(http.MethodGet, "/files?path=big.bin", nil))
		if resp.StatusCode != 200 || !bytes.Equal(body, big) || resp.Header.Get("Content-Length") != strconv.Itoa(len(big)) {
			t.Fatalf("read %d: status %d, %d bytes, equal %v, headers %v", i, resp.StatusCode, len(body), bytes.Equal(body, big), resp.Header)
		}
	}
	req := e.request(http.MethodGet, "/files?path=big.bin", nil)
	req.Header.Set("Range", "bytes=100000-2999999")
	resp, body := e.do(req)
	if resp.StatusCode != 206 || !bytes.Equal(body, big[100000:3000000]) || resp.Header.Get("Content-Range") != "bytes 100000-2999999/"+strconv.Itoa(len(big)) {
		t.Fatalf("range: status %d, %d bytes, headers %v", resp.StatusCode, len(body), resp.Header)
	}
	req = e.request(http.MethodGet, "/files?path=big.bin", nil)
	req.Header.Set("Range", "bytes=99999999-")
	if resp, _ := e.do(req); resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		t.Fatalf("range past the end: status %d", resp.StatusCode)
	}
	if resp, body := e.do(e.request(http.MethodGet, "/files?path=/home/user/nope", nil)); resp.StatusCode != 404 {
		t.Fatalf("missing: status %d body %s", resp.StatusCode, body)
	}
	if resp, body := e.do(e.request(http.MethodGet, "/files?path=/home/user", nil)); resp.StatusCode != 400 {
		t.Fatalf("directory: status %d body %s", resp.StatusCode, body)
	}
}

// TestBreakDownloadCutOffOwnClient: execd announces a Content-Length and
// its connection closes half-way; through the own client the SDK's
// response must end broken, never as a clean shorter file, and the
// outcome says the sandbox side broke it.
func TestBreakDownloadCutOffOwnClient(t *testing.T) {
	const p = "/home/user/big.bin"
	mux := http.NewServeMux()
	prefix := "/" + testSandbox + "/44772"
	mux.HandleFunc(prefix+"/files/info", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{p: map[string]any{"path": p, "type": "file", "size": 4 << 20, "mode": 644}})
	})
	mux.HandleFunc(prefix+"/files/download", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(4<<20))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(bytes.Repeat([]byte("a"), 1<<20))
		http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler) // the connection breaks mid-body
	})
	gw, tok, outcomes := newFakeGatewayOutcomesDeps(t, mux, func(d *Deps) { d.Execd = ownClient(t) })
	resp, err := http.DefaultClient.Do(gwRequest(t, gw, tok, http.MethodGet, "/files?path="+p, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("a cut-off download reached the client as a complete %d-byte file (status %d)", len(b), resp.StatusCode)
	}
	if o := <-outcomes; o.Code != CodeSandboxUnreachable {
		t.Fatalf("outcome %+v, want %s", o, CodeSandboxUnreachable)
	}
}
