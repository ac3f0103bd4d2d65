package lifecycle_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/httpapi"
	"github.com/sandgate/sandgate/corectl/sandboxlogs"
)

// fakeLogs is a sandboxlogs.Source with a fixed log per pod, in the
// kubelet's form; it records what was asked.
type fakeLogs struct {
	mu    sync.Mutex
	logs  map[string]string // by "<namespace>/<pod>/<container>"
	asked []sandboxlogs.ReadOptions
}

func (f *fakeLogs) Stream(_ context.Context, ns, pod, container string, o sandboxlogs.ReadOptions) (io.ReadCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, o)
	return io.NopCloser(strings.NewReader(f.logs[ns+"/"+pod+"/"+container])), nil
}

// TestSandboxLogs: GET /sandboxes/{id}/logs and /v2/…/logs answer E2B's
// SandboxLogs and SandboxLogsV2Response from the sandbox container's log
// of each of its pods (merged by time): v1 oldest first from start; v2
// newest first by default, forward from a cursor, limit, level, search;
// malformed parameters are 400; another credential's, a missing or a
// deleting sandbox is 404.
func TestSandboxLogs(t *testing.T) {
	logs := &fakeLogs{logs: map[string]string{}}
	w := startWorld(t, env.Config, worldOptions{logs: logs})
	id := w.create(`{"templateID":"base"}`).SandboxID
	owner := bs(w.nsA, id)
	env.Pod(t, owner, id+"-0", nil)
	env.Pod(t, owner, id+"-1", nil)
	base := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	ts := func(s int) string { return base.Add(time.Duration(s) * time.Second).Format(time.RFC3339Nano) }
	ms := func(s int) string { return strconv.FormatInt(base.Add(time.Duration(s)*time.Second).UnixMilli(), 10) }
	logs.mu.Lock()
	logs.logs[w.nsA+"/"+id+"-0/sandbox"] = ts(1) + " started\n" + ts(3) + " Error: disk full\n" + ts(5) + " done\n"
	logs.logs[w.nsA+"/"+id+"-1/sandbox"] = ts(2) + " second pod\n" + ts(4) + " error again\n"
	logs.mu.Unlock()

	v1 := func(q string) httpapi.SandboxLogs {
		t.Helper()
		st, _, body := w.call("GET", "/sandboxes/"+id+"/logs"+q, "key-a", "")
		if st != http.StatusOK {
			t.Fatalf("v1 logs%s = %d %s", q, st, body)
		}
		conform(t, "v1 logs", "SandboxLogs", body)
		var l httpapi.SandboxLogs
		_ = json.Unmarshal(body, &l)
		return l
	}
	v2 := func(q string) string {
		t.Helper()
		st, _, body := w.call("GET", "/v2/sandboxes/"+id+"/logs"+q, "key-a", "")
		if st != http.StatusOK {
			t.Fatalf("v2 logs%s = %d %s", q, st, body)
		}
		conform(t, "v2 logs", "SandboxLogsV2Response", body)
		var l httpapi.SandboxLogsV2
		_ = json.Unmarshal(body, &l)
		var out []string
		for _, e := range l.Logs {
			if e.Level != "info" || e.Fields == nil {
				t.Errorf("entry %+v", e)
			}
			out = append(out, e.Message)
		}
		return strings.Join(out, "|")
	}

	l := v1("")
	if len(l.Logs) != 5 || l.Logs[0].Line != "started" || l.Logs[1].Line != "second pod" || l.Logs[4].Line != "done" ||
		l.Logs[0].Timestamp != ts(1) || len(l.LogEntries) != 5 || l.LogEntries[2].Message != "Error: disk full" {
		t.Fatalf("v1 logs %+v", l)
	}
	if l := v1("?start=" + ms(3) + "&limit=2"); len(l.Logs) != 2 || l.Logs[0].Line != "Error: disk full" || l.Logs[1].Line != "error again" {
		t.Fatalf("v1 from 3 s, 2 lines: %+v", l)
	}
	for q, want := range map[string]string{
		"":                 "done|error again|Error: disk full|second pod|started",
		"?limit=2":         "done|error again",
		"?cursor=" + ms(3): "Error: disk full|second pod|started",
		"?cursor=" + ms(3) + "&direction=forward&limit=2": "Error: disk full|error again",
		"?direction=forward&limit=1":                      "started",
		"?search=error":                                   "error again",
		"?level=info":                                     "done|error again|Error: disk full|second pod|started",
		"?level=warn":                                     "",
		"?limit=0":                                        "",
	} {
		if got := v2(q); got != want {
			t.Errorf("v2 logs%s = %q, want %q", q, got, want)
		}
	}
	logs.mu.Lock()
	for _, o := range logs.asked {
		if o.Tail && !o.Since.IsZero() {
			t.Errorf("a backward read asked since %v", o.Since)
		}
	}
	logs.mu.Unlock()

	for _, q := range []string{"?limit=1001", "?limit=-1", "?cursor=x", "?direction=up", "?level=fatal", "?search=" + strings.Repeat("s", 257), "?limit=1&limit=2"} {
		if st, _, body := w.call("GET", "/v2/sandboxes/"+id+"/logs"+q, "key-a", ""); st != http.StatusBadRequest {
			t.Errorf("v2 logs%.30s = %d %s, want 400", q, st, body)
		} else {
			conform(t, "v2 logs"+q, "Error", body)
		}
	}
	if st, _, body := w.call("GET", "/sandboxes/"+id+"/logs?start=-5", "key-a", ""); st != http.StatusBadRequest {
		t.Errorf("v1 logs with a negative start = %d %s", st, body)
	}
	for _, r := range [][2]string{{"key-a2", id}, {"key-a", "sb00000000000000000000"}} {
		for _, p := range []string{"/sandboxes/" + r[1] + "/logs", "/v2/sandboxes/" + r[1] + "/logs"} {
			if st, _, body := w.call("GET", p, r[0], ""); st != http.StatusNotFound {
				t.Errorf("%s as %s = %d %s, want 404", p, r[0], st, body)
			}
		}
	}
}

// TestSandboxLogsAsServiceAccount: corectl reads pods/log with the RBAC
// of deploy/compute/rbac.yaml. The test apiserver has no kubelet, so the
// pod's log cannot be read (it is not scheduled) and adds nothing: 200
// with no lines, where a missing RBAC rule would answer 503.
func TestSandboxLogsAsServiceAccount(t *testing.T) {
	w := startAs(t, serviceAccount(t))
	id := w.create(`{"templateID":"base"}`).SandboxID
	env.Pod(t, bs(w.nsA, id), id+"-0", nil)
	for p, want := range map[string]string{"/sandboxes/" + id + "/logs": `{"logs":[],"logEntries":[]}`, "/v2/sandboxes/" + id + "/logs": `{"logs":[]}`} {
		if st, _, body := w.call("GET", p, "key-a", ""); st != http.StatusOK || strings.TrimSpace(string(body)) != want {
			t.Errorf("%s = %d %s, want 200 %s", p, st, body, want)
		}
	}
}
