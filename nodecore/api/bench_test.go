package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/node/proto"
)

// BenchmarkOperation measures one POST …/<node_id>/operations (an info)
// through Handler.ServeHTTP: the body read and decode, the hub's dispatch
// over a real WebSocket on loopback to a simulated node that answers at
// once (in this process), and the answer's encoding into a writer that
// keeps nothing. The API's own HTTP server is left out (Caddy serves it in
// the gateway), so the figure is the handler's and the hub's work per
// operation, together with the simulated node's.
func BenchmarkOperation(b *testing.B) {
	e := newAPIEnv(b)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	e.node(nodeA, secretA, true, func(r *proto.Request) *proto.Response {
		return &proto.Response{ID: r.ID, ConnectionID: r.ConnectionID, Info: &proto.Info{Reference: r.Reference,
			DeploymentGeneration: r.DeploymentGeneration, State: proto.StateRunning, Image: "busybox:latest",
			CreatedAt: at, RenewedAt: at}}
	})
	h := &Handler{Hub: e.hub, Tokens: [][sha256.Size]byte{sha256.Sum256([]byte(apiToken))}}
	body := []byte(`{"operation":"info","deployment_generation":1,"timeout_ms":5000,` +
		`"reference":{"tenant_id":"t1","environment_id":"e1","allocation_id":"a1"}}`)
	rd := bytes.NewReader(body)
	req := httptest.NewRequestWithContext(b.Context(), http.MethodPost, Prefix+"/"+nodeA+"/operations", nil)
	req.Header.Set("Authorization", "Bearer "+apiToken)
	req.Header.Set("Content-Type", "application/json")
	req.ContentLength = int64(len(body))
	w := &recordWriter{h: http.Header{}}

	// One call first, to check the answer.
	rd.Reset(body)
	req.Body = io.NopCloser(rd)
	h.ServeHTTP(w, req)
	var out OperationResult
	if err := json.Unmarshal(w.body, &out); err != nil || w.status != http.StatusOK || out.Outcome != "success" {
		b.Fatalf("%d %s: %v", w.status, w.body, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU(b)
	for b.Loop() {
		rd.Reset(body)
		req.Body = io.NopCloser(rd)
		clear(w.h)
		w.body = w.body[:0]
		h.ServeHTTP(w, req)
		if w.status != http.StatusOK {
			b.Fatalf("%d %s", w.status, w.body)
		}
	}
	reportCPU(b, cpu)
}

// recordWriter is an http.ResponseWriter that keeps the last status and
// the body written since it was last emptied.
type recordWriter struct {
	h      http.Header
	status int
	body   []byte
}

func (w *recordWriter) Header() http.Header { return w.h }
func (w *recordWriter) Write(p []byte) (int, error) {
	w.body = append(w.body, p...)
	return len(p), nil
}
func (w *recordWriter) WriteHeader(status int) { w.status = status }

// processCPU is this process's user and system CPU time so far; a
// benchmark reports its growth per operation as cpu-ns/op, which counts
// every goroutine's work for the operation (the simulated node's too) and
// is less disturbed by other processes on a loaded machine than ns/op.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time since start per operation, cpu-ns/op.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op")
}
