package dataplane

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/connect"
	"github.com/sandgate/sandgate/gateway/envd"
)

// openWatch starts a Filesystem/WatchDir stream for msg and returns a
// reader of its frames.
func (e *testEnv) openWatch(ctx context.Context, msg string, hdr map[string]string) (*http.Response, *bufio.Reader) {
	e.t.Helper()
	return e.openStreamAt(ctx, "/filesystem.Filesystem/WatchDir", msg, hdr)
}

// nextWatch returns the next event of a watch stream that is not a
// keepalive: "start", "<TYPE> <name>" for a filesystem event, or "eos
// <code>" for the end-stream frame (its error's code, or "" for none).
func nextWatch(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	for {
		f, err := readFrame(t, r)
		if err != nil {
			t.Fatalf("stream ended: %v", err)
		}
		if f.flags == connect.FlagEndStream {
			code := ""
			if e, ok := f.json["error"].(map[string]any); ok {
				code, _ = e["code"].(string)
				if m, _ := e["message"].(string); m != "" {
					code += " " + strings.SplitN(m, ":", 2)[0]
				}
			}
			return "eos " + code
		}
		ev := f.json
		switch {
		case ev["start"] != nil:
			return "start"
		case ev["filesystem"] != nil:
			fs := ev["filesystem"].(map[string]any)
			return fmt.Sprintf("%s %s", fs["type"], fs["name"])
		}
	}
}

func watchMsg(dir string, recursive bool) string {
	return fmt.Sprintf(`{"path":%q,"recursive":%v}`, dir, recursive)
}

// TestWatchDirEvents: a watch reports, in order, a file created, written,
// its permissions changed, renamed (removed and created) and removed, and
// a directory created, each by its name; what happens inside a directory
// under it is not reported without recursive (the next event is the one
// of the watched directory's own entry).
func TestWatchDirEvents(t *testing.T) {
	e := newTestEnv(t, extended)
	dir := "/home/user/watched"
	if err := os.MkdirAll(e.hostPath(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, r := e.openWatch(ctx, watchMsg(dir, false), nil)
	if ev := nextWatch(t, r); ev != "start" {
		t.Fatalf("first event %q", ev)
	}
	host := func(name string) string { return e.hostPath(dir + "/" + name) }
	steps := []struct {
		do   func() error
		want []string
	}{
		{func() error { return os.WriteFile(host("a.txt"), []byte("one"), 0o644) }, []string{"EVENT_TYPE_CREATE a.txt"}},
		{func() error { return os.WriteFile(host("a.txt"), []byte("one two"), 0o644) }, []string{"EVENT_TYPE_WRITE a.txt"}},
		{func() error { return os.Chmod(host("a.txt"), 0o600) }, []string{"EVENT_TYPE_CHMOD a.txt"}},
		{func() error { return os.Rename(host("a.txt"), host("b.txt")) }, []string{"EVENT_TYPE_REMOVE a.txt", "EVENT_TYPE_CREATE b.txt"}},
		{func() error { return os.Remove(host("b.txt")) }, []string{"EVENT_TYPE_REMOVE b.txt"}},
		{func() error { return os.Mkdir(host("sub"), 0o755) }, []string{"EVENT_TYPE_CREATE sub"}},
		{func() error {
			if err := os.WriteFile(host("sub/inner.txt"), []byte("x"), 0o644); err != nil {
				return err
			}
			return os.WriteFile(host("c.txt"), []byte("x"), 0o644)
		}, []string{"EVENT_TYPE_CREATE c.txt"}},
	}
	for i, s := range steps {
		if err := s.do(); err != nil {
			t.Fatal(err)
		}
		for _, want := range s.want {
			if ev := nextWatch(t, r); ev != want {
				t.Fatalf("step %d: event %q, want %q", i, ev, want)
			}
		}
	}
}

// TestWatchDirRecursive: with recursive, a file in a directory under the
// watched one is reported by its path relative to it.
func TestWatchDirRecursive(t *testing.T) {
	e := newTestEnv(t, extended)
	dir := "/home/user/rwatched"
	if err := os.MkdirAll(e.hostPath(dir+"/sub/deeper"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, r := e.openWatch(ctx, watchMsg(dir, true), nil)
	if ev := nextWatch(t, r); ev != "start" {
		t.Fatalf("first event %q", ev)
	}
	if err := os.WriteFile(e.hostPath(dir+"/sub/deeper/f.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ev := nextWatch(t, r); ev != "EVENT_TYPE_CREATE sub/deeper/f.txt" {
		t.Fatalf("event %q", ev)
	}
}

// TestWatchDirEnds: a watch of a missing directory or of a file is refused
// before its start event (FILE_NOT_FOUND, NOT_A_DIRECTORY), a message
// without a path is BAD_REQUEST; a watched directory that is removed ends
// the stream with FILE_NOT_FOUND after its removal events; a watch ends at
// its Connect-Timeout-Ms with COMMAND_TIMEOUT; malformed messages are
// BAD_REQUEST before anything is listed; (deadline_exceeded); a ninth
// watch of one sandbox is GATEWAY_BUSY (deadline_exceeded, as every
// unavailable before a stream's start event: Code.StreamCode).
func TestWatchDirEnds(t *testing.T) {
	e := newTestEnv(t, extended)
	dir := "/home/user/gone"
	if err := os.MkdirAll(e.hostPath(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.hostPath("/home/user/file.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ msg, want string }{
		{watchMsg("/home/user/missing", false), "eos not_found FILE_NOT_FOUND"},
		{watchMsg("/home/user/file.txt", false), "eos invalid_argument NOT_A_DIRECTORY"},
		{`{"recursive":true}`, "eos invalid_argument BAD_REQUEST"},
		{`[]`, "eos invalid_argument BAD_REQUEST"},
		{`{"path":"/home/user"`, "eos invalid_argument BAD_REQUEST"},
		{`{"path":"/home/user","recursive":"yes"}`, "eos invalid_argument BAD_REQUEST"},
	} {
		_, r := e.openWatch(context.Background(), c.msg, nil)
		if ev := nextWatch(t, r); ev != c.want {
			t.Errorf("%s: %q, want %q", c.msg, ev, c.want)
		}
		e.waitOutcome()
	}

	_, r := e.openWatch(context.Background(), watchMsg(dir, false), nil)
	if ev := nextWatch(t, r); ev != "start" {
		t.Fatalf("first event %q", ev)
	}
	if err := os.RemoveAll(e.hostPath(dir)); err != nil {
		t.Fatal(err)
	}
	if ev := nextWatch(t, r); ev != "eos not_found FILE_NOT_FOUND" {
		t.Fatalf("after the directory's removal: %q", ev)
	}
	e.waitOutcome()

	if err := os.MkdirAll(e.hostPath(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	_, r = e.openWatch(context.Background(), watchMsg(dir, false), map[string]string{"Connect-Timeout-Ms": "300"})
	if ev := nextWatch(t, r); ev != "start" {
		t.Fatalf("first event %q", ev)
	}
	if ev := nextWatch(t, r); ev != "eos deadline_exceeded COMMAND_TIMEOUT" {
		t.Fatalf("at the timeout: %q", ev)
	}
	e.waitOutcome()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range maxWatchStreamsPerSandbox {
		_, r := e.openWatch(ctx, watchMsg(dir, false), nil)
		if ev := nextWatch(t, r); ev != "start" {
			t.Fatalf("first event %q", ev)
		}
	}
	_, r = e.openWatch(ctx, watchMsg(dir, false), nil)
	if ev := nextWatch(t, r); ev != "eos deadline_exceeded GATEWAY_BUSY" {
		t.Fatalf("a watch over the sandbox's bound: %q", ev)
	}
	if o := e.waitOutcome(); o.Code != CodeGatewayBusy {
		t.Fatalf("outcome %+v", o)
	}
}

// TestWatchChanges: the events between two listings, in their order.
func TestWatchChanges(t *testing.T) {
	t0 := time.Unix(1000, 0)
	old := map[string]watchEntry{
		"keep": {size: 1, modified: t0, mode: 644}, "gone": {size: 1, modified: t0, mode: 644},
		"grow": {size: 1, modified: t0, mode: 644}, "touch": {size: 1, modified: t0, mode: 644},
		"perm": {size: 1, modified: t0, mode: 644}, "both": {size: 1, modified: t0, mode: 644},
		"d": {dir: true, modified: t0, mode: 755}, "swap": {dir: true, mode: 755},
	}
	new := map[string]watchEntry{
		"keep": {size: 1, modified: t0, mode: 644}, "grow": {size: 2, modified: t0, mode: 644},
		"touch": {size: 1, modified: t0.Add(time.Nanosecond), mode: 644}, "perm": {size: 1, modified: t0, mode: 600},
		"both": {size: 3, modified: t0, mode: 600}, "d": {dir: true, modified: t0.Add(time.Hour), mode: 755},
		"swap": {size: 0, mode: 644}, "new": {size: 0, mode: 644},
	}
	var got []string
	for _, ev := range watchChanges(old, new) {
		got = append(got, ev.Type+" "+ev.Name)
	}
	want := []string{envd.EventRemove + " gone", envd.EventRemove + " swap", envd.EventCreate + " new", envd.EventCreate + " swap",
		envd.EventWrite + " both", envd.EventChmod + " both", envd.EventWrite + " grow", envd.EventChmod + " perm", envd.EventWrite + " touch"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("events\n%v\nwant\n%v", got, want)
	}
}

// watcherCall sends a Filesystem unary call about watchers and returns its
// status and body.
func watcherCall(e *testEnv, method, msg string) (int, string) {
	req := e.request(http.MethodPost, "/filesystem.Filesystem/"+method, strings.NewReader(msg))
	req.Header.Set("Content-Type", "application/json")
	resp, body := e.do(req)
	e.waitOutcome()
	return resp.StatusCode, string(body)
}

// TestWatchers: a watcher (the Python SDK's synchronous watch_dir) answers
// the changes since its last call, by name, in WatchDir's order, and an
// empty list when nothing changed; its file is the gateway's (mode 0600 in
// the process directory); after RemoveWatcher its id is WATCHER_NOT_FOUND,
// as an id the gateway never gave is (and one that is not of its form
// names no file); a forged watcher file names no watcher; malformed
// messages are BAD_REQUEST; a watcher of a missing directory is
// FILE_NOT_FOUND.
func TestWatchers(t *testing.T) {
	e := newTestEnv(t, extended)
	dir := "/home/user/pywatched"
	if err := os.MkdirAll(e.hostPath(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	code, body := watcherCall(e, "CreateWatcher", watchMsg(dir, false))
	var created struct{ WatcherID string }
	if err := json.Unmarshal([]byte(body), &created); code != 200 || err != nil || len(created.WatcherID) != 32 {
		t.Fatalf("CreateWatcher: %d %s", code, body)
	}
	id := created.WatcherID
	fi, err := os.Stat(e.hostPath("/tmp/.sandgate/processes/" + id + ".watch"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the watcher's file: %v %v", fi, err)
	}
	get := func() string {
		t.Helper()
		code, body := watcherCall(e, "GetWatcherEvents", fmt.Sprintf(`{"watcherId":%q}`, id))
		if code != 200 {
			t.Fatalf("GetWatcherEvents: %d %s", code, body)
		}
		return body
	}
	if b := get(); b != `{"events":[]}` {
		t.Fatalf("nothing changed: %s", b)
	}
	if err := os.WriteFile(e.hostPath(dir+"/a.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(e.hostPath(dir+"/d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if b := get(); b != `{"events":[{"name":"a.txt","type":"EVENT_TYPE_CREATE"},{"name":"d","type":"EVENT_TYPE_CREATE"}]}` {
		t.Fatalf("after two creations: %s", b)
	}
	if err := os.WriteFile(e.hostPath(dir+"/a.txt"), []byte("xyz"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(e.hostPath(dir + "/d")); err != nil {
		t.Fatal(err)
	}
	if b := get(); b != `{"events":[{"name":"d","type":"EVENT_TYPE_REMOVE"},{"name":"a.txt","type":"EVENT_TYPE_WRITE"}]}` {
		t.Fatalf("after a write and a removal: %s", b)
	}
	if b := get(); b != `{"events":[]}` {
		t.Fatalf("asked again: %s", b)
	}
	// The proto name of the field is read too.
	if code, body := watcherCall(e, "GetWatcherEvents", fmt.Sprintf(`{"watcher_id":%q}`, id)); code != 200 {
		t.Fatalf("watcher_id: %d %s", code, body)
	}
	if code, body := watcherCall(e, "RemoveWatcher", fmt.Sprintf(`{"watcherId":%q}`, id)); code != 200 || body != "{}" {
		t.Fatalf("RemoveWatcher: %d %s", code, body)
	}
	forged := strings.Repeat("ab", 16)
	e.writeFile("/tmp/.sandgate/processes/"+forged+".watch", `{"dir":"relative","depth":1}`)
	for _, c := range []struct {
		method, msg string
		code        int
		want        string
	}{
		{"GetWatcherEvents", fmt.Sprintf(`{"watcherId":%q}`, id), 404, "WATCHER_NOT_FOUND"},
		{"RemoveWatcher", fmt.Sprintf(`{"watcherId":%q}`, id), 404, "WATCHER_NOT_FOUND"},
		{"GetWatcherEvents", `{"watcherId":"../../etc/passwd"}`, 404, "WATCHER_NOT_FOUND"},
		{"GetWatcherEvents", fmt.Sprintf(`{"watcherId":%q}`, forged), 404, "WATCHER_NOT_FOUND"},
		{"GetWatcherEvents", `{}`, 400, "BAD_REQUEST"},
		{"GetWatcherEvents", `{"watcherId":"a","watcher_id":"b"}`, 400, "BAD_REQUEST"},
		{"RemoveWatcher", `[]`, 400, "BAD_REQUEST"},
		{"CreateWatcher", `{"path":""}`, 400, "BAD_REQUEST"},
		{"CreateWatcher", watchMsg("/home/user/nope", false), 404, "FILE_NOT_FOUND"},
	} {
		if code, body := watcherCall(e, c.method, c.msg); code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s %s: %d %s, want %d %s", c.method, c.msg, code, body, c.code, c.want)
		}
	}
	if _, err := os.Stat(e.hostPath("/tmp/.sandgate/processes/" + id + ".watch")); !os.IsNotExist(err) {
		t.Fatalf("the removed watcher's file: %v", err)
	}
}

// TestWatchersBounded: a sandbox holds at most maxWatchersPerSandbox
// watchers; one more is GATEWAY_BUSY naming watchers_per_sandbox, and
// after a RemoveWatcher one can be made again.
func TestWatchersBounded(t *testing.T) {
	e := newTestEnv(t, extended)
	dir := "/home/user/many"
	if err := os.MkdirAll(e.hostPath(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	var last string
	for range maxWatchersPerSandbox {
		code, body := watcherCall(e, "CreateWatcher", watchMsg(dir, true))
		if code != 200 {
			t.Fatalf("CreateWatcher: %d %s", code, body)
		}
		last = body
	}
	if code, body := watcherCall(e, "CreateWatcher", watchMsg(dir, true)); code != 503 || !strings.Contains(body, "GATEWAY_BUSY") ||
		!strings.Contains(body, "watchers") {
		t.Fatalf("one watcher over the bound: %d %s", code, body)
	}
	var created struct{ WatcherID string }
	_ = json.Unmarshal([]byte(last), &created)
	if code, body := watcherCall(e, "RemoveWatcher", fmt.Sprintf(`{"watcherId":%q}`, created.WatcherID)); code != 200 {
		t.Fatalf("RemoveWatcher: %d %s", code, body)
	}
	if code, body := watcherCall(e, "CreateWatcher", watchMsg(dir, true)); code != 200 {
		t.Fatalf("CreateWatcher after a removal: %d %s", code, body)
	}
}

// FuzzDecodeWatcher: whatever a watcher's file holds (the sandbox can
// write it), decodeWatcher either refuses it or returns an absolute
// directory, one of the two depths, and a listing that encodes and
// decodes to itself.
func FuzzDecodeWatcher(f *testing.F) {
	good, _ := encodeWatcher("/home/user", 1, map[string]watchEntry{"a": {size: 3, modified: time.Unix(5, 6), mode: 644}, "d": {dir: true}})
	for _, s := range []string{string(good), `{}`, `{"dir":"/","depth":32,"entries":{"x":[1,2,3,4]}}`, `{"dir":"x","depth":1}`, `[]`, `{"entries":{"a":[0]}}`,
		`{"dir":"/","depth":1,"entries":{"old":[0,1,-6000000000000000000,644]}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		dir, depth, snap, ok := decodeWatcher(b)
		if !ok {
			return
		}
		if !strings.HasPrefix(dir, "/") || (depth != 1 && depth != watchRecursiveDepth) {
			t.Fatalf("accepted %q depth %d", dir, depth)
		}
		again, err := encodeWatcher(dir, depth, snap)
		if err != nil {
			t.Fatal(err)
		}
		dir2, depth2, snap2, ok := decodeWatcher(again)
		if !ok || dir2 != dir || depth2 != depth || len(watchChanges(snap, snap2)) != 0 || len(snap2) != len(snap) {
			t.Fatalf("%s did not decode to itself", again)
		}
	})
}
