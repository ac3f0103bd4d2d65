package dataplane

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/envd"
	"github.com/sandgate/sandgate/gateway/execd"
	"github.com/sandgate/sandgate/integration/execdstub"
	"github.com/sandgate/sandgate/integration/fixedentry"
)

// TestExtendedLargeCommandStaysReachable: a command whose config is large
// (an inline script of 100 KiB, as commands.run(script, {background:
// true}) sends it in args) is listed, and kill reaches it: the record the
// gateway wrote must be one it reads back.
func TestExtendedLargeCommandStaysReachable(t *testing.T) {
	e := newTestEnv(t, extended, func(_ *Config, x *execdstub.Config) { x.KillGrace = 200 * time.Millisecond })
	script := "sleep 60 # " + strings.Repeat("x", 100<<10)
	ctx, cancel := context.WithCancel(context.Background())
	_, r := e.openStream(ctx, "Start", `{"process":{"cmd":"/bin/bash","args":["-c",`+mustJSON(script)+`]}}`, nil)
	_, start := nextEvent(t, r, "start")
	pid := uint32(start["pid"].(float64))
	cancel()
	e.waitOutcome()

	resp, body := e.processCall("List", `{}`)
	var list struct{ Processes []struct{ PID uint32 } }
	if err := json.Unmarshal(body, &list); err != nil || resp.StatusCode != 200 || len(list.Processes) != 1 || list.Processes[0].PID != pid {
		t.Fatalf("List: %d %.300s (pid %d)", resp.StatusCode, body, pid)
	}
	e.waitOutcome()
	resp, body = e.processCall("SendSignal", fmt.Sprintf(`{"process":{"pid":%d},"signal":"SIGNAL_SIGKILL"}`, pid))
	if resp.StatusCode != 200 {
		t.Fatalf("SendSignal: %d %s", resp.StatusCode, body)
	}
	e.waitOutcome()
	if rec, err := waitEnded(e, func(r execdstub.CommandRecord) bool { return r.Background }); err != nil || !rec.Interrupted {
		t.Fatalf("execd record %+v %v", rec, err)
	}
}

// countingTransport counts the requests the gateway sends to the fixed
// entry and the response bytes it reads.
type countingTransport struct {
	requests, bytes atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.requests.Add(1)
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: &c.bytes}
	}
	return resp, err
}

func (c *countingTransport) reset() { c.requests.Store(0); c.bytes.Store(0) }

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// TestExtendedProcessTableBounded: the process directory is the
// sandbox's to write, so what List reads back from it is bounded before
// it is read: the records execd's search names (maxProcessRecords), the
// search's answer (maxSearchBytes), and the bytes of the records read
// (listBudget). Each refusal is EXECD_FAILED with a message naming the
// directory, costs a bounded number of execd requests and bytes, and
// changes nothing in the sandbox. Large records naming distinct commands,
// many small records, and a search answer made large by a subdirectory are
// tried. Then large records that all name the one running command (planted
// copies: none is pruned): each is read up to its head only, and List
// answers with the command once.
func TestExtendedProcessTableBounded(t *testing.T) {
	ct := &countingTransport{}
	e := newTestEnvDeps(t, func(d *Deps) { d.Execd = &execd.Client{Transport: ct} },
		extended, func(c *Config, _ *execdstub.Config) { c.MaxMessageBytes = 64 << 10 })
	ctx, cancel := context.WithCancel(context.Background())
	_, r := e.openStream(ctx, "Start", startMsg("sleep 60"), nil)
	_, start := nextEvent(t, r, "start")
	pid := uint32(start["pid"].(float64))
	cancel()
	e.waitOutcome()
	dir := e.hostPath("/tmp/.sandgate/processes")
	var rec procRecord
	if b, err := os.ReadFile(filepath.Join(dir, fmt.Sprint(pid)+".json")); err != nil || json.Unmarshal(b, &rec) != nil {
		t.Fatalf("the running command's record: %s %v", b, err)
	}
	h := &Handler{cfg: Config{MaxMessageBytes: 64 << 10}}
	h.cfg.defaults()
	forge := func(n int, cfgBytes int, sub string, distinct bool) {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= n; i++ {
			id := rec.ID
			if distinct {
				id = fmt.Sprintf("%032x", i)
			}
			b, _ := json.Marshal(procRecord{ID: id, PID: uint32(i), Config: envd.ProcessConfig{Cmd: "x",
				Envs: map[string]string{"PAD": strings.Repeat("p", cfgBytes)}}})
			if err := os.WriteFile(filepath.Join(dir, sub, fmt.Sprint(i)+".json"), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []struct {
		name         string
		n, cfg       int
		sub, message string
		maxBytes     int64
	}{
		{"many records", maxProcessRecords + 1, 10, "", "more than 256 process records", maxSearchBytes + 128<<10},
		{"large records", 100, 60 << 10, "", "more than", h.listBudget() + h.recordLimit() + maxSearchBytes + 100*recordHead},
		{"large search", 8000, 10, "junk", "more than", maxSearchBytes + 128<<10},
	}
	cleanup := func() {
		ents, _ := os.ReadDir(dir)
		for _, ent := range ents {
			if ent.Name() != fmt.Sprint(pid)+".json" && !strings.HasPrefix(ent.Name(), fmt.Sprint(pid)+".") {
				_ = os.RemoveAll(filepath.Join(dir, ent.Name()))
			}
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			forge(c.n, c.cfg, c.sub, true)
			t.Cleanup(cleanup)
			before, _ := os.ReadDir(dir)
			ct.reset()
			resp, body := e.processCall("List", `{}`)
			o := e.waitOutcome()
			var ce struct{ Code, Message string }
			_ = json.Unmarshal(body, &ce)
			if resp.StatusCode != 500 || o.Code != CodeExecdFailed || !strings.Contains(ce.Message, c.message) ||
				!strings.Contains(ce.Message, "/tmp/.sandgate/processes") {
				t.Fatalf("List: %d %.300s (outcome %s)", resp.StatusCode, body, o.Code)
			}
			if got := ct.bytes.Load(); got > c.maxBytes {
				t.Errorf("List read %d bytes from execd, over the bound %d", got, c.maxBytes)
			}
			if got := ct.requests.Load(); got > 300 {
				t.Errorf("List sent %d requests to execd", got)
			}
			if after, _ := os.ReadDir(dir); len(after) != len(before) {
				t.Errorf("List refused but changed the process directory: %d entries, then %d", len(before), len(after))
			}
		})
	}
	t.Run("planted copies of the running command's record", func(t *testing.T) {
		t.Cleanup(cleanup)
		n := maxProcessRecords - 1
		forge(n, 60<<10, "", false)
		ct.reset()
		resp, body := e.processCall("List", `{}`)
		e.waitOutcome()
		var list struct{ Processes []struct{ PID uint32 } }
		if err := json.Unmarshal(body, &list); err != nil || resp.StatusCode != 200 || len(list.Processes) != 1 {
			t.Fatalf("List: %d %.300s", resp.StatusCode, body)
		}
		// The search, one head per record, and one record read whole with
		// its command's status.
		if got, max := ct.bytes.Load(), int64(maxSearchBytes+int64(n+1)*recordHead+2*h.recordLimit()+64<<10); got > max {
			t.Errorf("List read %d bytes from execd, over %d", got, max)
		}
		if got, max := ct.requests.Load(), int64(1+(n+1)+2+1); got > max {
			t.Errorf("List sent %d requests to execd, over %d", got, max)
		}
	})

	// The running process itself is still listed once the directory is
	// back to what the gateway wrote.
	resp, body := e.processCall("List", `{}`)
	e.waitOutcome()
	if resp.StatusCode != 200 || !strings.Contains(string(body), fmt.Sprintf(`"pid":%d`, pid)) {
		t.Fatalf("List afterwards: %d %.300s", resp.StatusCode, body)
	}
}

// FuzzParseRecordHead: a record the gateway encodes, cut anywhere after
// its pid, gives back its command id and pid; any other input is refused
// or read without a panic, and never yields a pid of 2^31 or more.
func FuzzParseRecordHead(f *testing.F) {
	f.Add("0123456789abcdef0123456789abcdef", uint32(7), 40, []byte(`{"id":"x","pid":1}`))
	f.Add("i\"d\u2028<&>", uint32(1<<31-1), 0, []byte(`{"pid":1,"id":"x"}`))
	f.Add("", uint32(0), 3, []byte(`{"id":"a","pid":99999999999}`))
	h := &Handler{}
	h.cfg.defaults()
	f.Fuzz(func(t *testing.T, id string, pid uint32, cut int, other []byte) {
		if gotID, gotPID, ok := parseRecordHead(other); ok && gotPID >= 1<<31 {
			t.Fatalf("%q: pid %d (id %q)", other, gotPID, gotID)
		}
		pid &= 1<<31 - 1
		b, e := h.encodeRecord(procRecord{ID: id, PID: pid, Config: envd.ProcessConfig{Cmd: "x"}})
		if e != nil {
			return
		}
		// The end of the pid: the first "," after "pid":.
		i := bytes.Index(b, []byte(`,"config"`))
		if i < 0 {
			t.Fatalf("record %s has no config after its pid", b)
		}
		if cut < 0 {
			cut = -cut
		}
		end := min(i+cut%(len(b)-i+1), len(b))
		var whole procRecord // the id as encoding/json reads the record back
		if err := json.Unmarshal(b, &whole); err != nil {
			t.Fatal(err)
		}
		gotID, gotPID, ok := parseRecordHead(b[:end])
		if !ok || gotPID != pid || gotID != whole.ID {
			t.Fatalf("record %s cut at %d: %q %d %v", b, end, gotID, gotPID, ok)
		}
	})
}

// TestProcessListSizesAreExecdsWord: the sizes execd's search reports are
// its word only. An execd that reports every record as 10 bytes and serves
// 60 KiB records naming distinct running commands still gets List refused
// once the bytes that came pass the budget, having read about that much.
func TestProcessListSizesAreExecdsWord(t *testing.T) {
	ct := &countingTransport{}
	e := newTestEnvDeps(t, func(d *Deps) { d.Execd = &execd.Client{Transport: ct} },
		extended, func(c *Config, _ *execdstub.Config) { c.MaxMessageBytes = 64 << 10 })
	h := &Handler{cfg: Config{MaxMessageBytes: 64 << 10}}
	h.cfg.defaults()
	record := func(pid int) []byte {
		b, _ := json.Marshal(procRecord{ID: fmt.Sprintf("%032x", pid), PID: uint32(pid), Config: envd.ProcessConfig{Cmd: "x",
			Envs: map[string]string{"PAD": strings.Repeat("p", 60<<10)}}})
		return b
	}
	liar := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := strings.TrimPrefix(r.URL.Path, "/"+testSandbox+"/44772")
		switch {
		case p == "/files/search":
			var list []map[string]any
			for i := 1; i <= 100; i++ {
				list = append(list, map[string]any{"path": fmt.Sprintf("/tmp/.sandgate/processes/%d.json", i), "size": 10})
			}
			_ = json.NewEncoder(w).Encode(list)
		case p == "/files/download":
			var pid int
			fmt.Sscanf(path.Base(r.URL.Query().Get("path")), "%d.json", &pid)
			b := record(pid)
			var from, to int
			fmt.Sscanf(r.Header.Get("Range"), "bytes=%d-%d", &from, &to)
			w.WriteHeader(http.StatusPartialContent)
			_, _ = w.Write(b[from:min(to+1, len(b))])
		case strings.HasPrefix(p, "/command/status/"):
			_, _ = fmt.Fprintf(w, `{"id":%q,"running":true}`, path.Base(p))
		default:
			http.NotFound(w, r)
		}
	}))
	defer liar.Close()
	e.ingress.SetSandbox(testSandbox, fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1",
		Ports: map[int]string{execd.DefaultPort: liar.Listener.Addr().String()}})
	resp, body := e.processCall("List", `{}`)
	o := e.waitOutcome()
	if resp.StatusCode != 500 || o.Code != CodeExecdFailed || !strings.Contains(string(body), "bytes of process records") {
		t.Fatalf("List: %d %.300s (outcome %s)", resp.StatusCode, body, o.Code)
	}
	if got, max := ct.bytes.Load(), h.listBudget()+h.recordLimit()+100*recordHead+64<<10; got > max {
		t.Errorf("List read %d bytes from execd, over %d", got, max)
	}
}
