package dataplane

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/admission"
	"github.com/sandgate/sandgate/gateway/connect"
	"github.com/sandgate/sandgate/gateway/credential"
	"github.com/sandgate/sandgate/gateway/envd"
	"github.com/sandgate/sandgate/gateway/execd"
	"github.com/sandgate/sandgate/internal/memtest"
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
// directory, one of the two depths, and a listing of at most its bound of
// entries that encodes and decodes to itself.
func FuzzDecodeWatcher(f *testing.F) {
	good, _ := encodeWatcher("/home/user", 1, map[string]watchEntry{"a": {size: 3, modified: time.Unix(5, 6), mode: 644}, "d": {dir: true}})
	for _, s := range []string{string(good), `{}`, `{"dir":"/","depth":32,"entries":{"x":[1,2,3,4]}}`, `{"dir":"x","depth":1}`, `[]`, `{"entries":{"a":[0]}}`,
		`{"dir":"/","depth":1,"entries":{"old":[0,1,-6000000000000000000,644]}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		dir, depth, snap, ok := decodeWatcher(b, 64)
		if !ok {
			return
		}
		if !strings.HasPrefix(dir, "/") || (depth != 1 && depth != watchRecursiveDepth) || len(snap) > 64 {
			t.Fatalf("accepted %q depth %d, %d entries", dir, depth, len(snap))
		}
		again, err := encodeWatcher(dir, depth, snap)
		if err != nil {
			t.Fatal(err)
		}
		dir2, depth2, snap2, ok := decodeWatcher(again, 64)
		if !ok || dir2 != dir || depth2 != depth || len(watchChanges(snap, snap2)) != 0 || len(snap2) != len(snap) {
			t.Fatalf("%s did not decode to itself", again)
		}
	})
}

// requestAs is e.request for credential cred's sandbox sbx.
func (e *testEnv) requestAs(cred, sbx, method, target string, body io.Reader) *http.Request {
	e.t.Helper()
	req := e.request(method, target, body)
	req.Header.Set(HeaderSandboxID, sbx)
	req.Header.Set(HeaderAccessToken, e.mint(cred, sbx))
	return req
}

// TestWatchStreamsPerCredential: a credential's directory watches are
// bounded over all its sandboxes (maxWatchStreamsPerCredential; 2 here),
// so one tenant's watches, each holding its listing between polls, cannot
// take every place of the gateway's (maxWatchStreams): its next watch, in
// a sandbox of its own with room, is GATEWAY_BUSY at
// watch_streams_per_credential, and another credential's first watch
// starts. Before, only the sandbox and the gateway were counted.
func TestWatchStreamsPerCredential(t *testing.T) {
	body := `[{"path":"/home/user/a","type":"file","size":1,"modified_at":"2026-12-01T06:31:43Z","owner":"root","group":"root","mode":644}]`
	e := newTestEnvDeps(t, func(d *Deps) { d.Execd = &execd.Client{Transport: cannedExecd(body)} }, extended)
	e.handler.shared.watchCreds = admission.New(maxWatchStreams, 2)
	e.creds.set(credential.Credential{ID: "cred-b", Enabled: true, ProjectNamespace: "ns2", ClusterID: "cluster-a"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch := func(cred, sbx string) string {
		req := e.requestAs(cred, sbx, http.MethodPost, "/filesystem.Filesystem/WatchDir", bytes.NewReader(envelope(0, []byte(watchMsg("/home/user", false)))))
		req = req.WithContext(ctx)
		req.Header.Set("Content-Type", "application/connect+json")
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return nextWatch(t, bufio.NewReader(resp.Body))
	}
	for _, sbx := range []string{"sbxa1", "sbxa2"} {
		if ev := watch("cred-a", sbx); ev != "start" {
			t.Fatalf("cred-a's watch in %s: %s", sbx, ev)
		}
	}
	if ev := watch("cred-a", "sbxa3"); !strings.Contains(ev, "GATEWAY_BUSY") {
		t.Fatalf("cred-a's third watch: %s, want GATEWAY_BUSY", ev)
	}
	if o := e.waitOutcome(); o.Code != CodeGatewayBusy || o.Bound != BoundWatchStreamsPerCredential {
		t.Fatalf("outcome %+v, want GATEWAY_BUSY at %s", o, BoundWatchStreamsPerCredential)
	}
	if ev := watch("cred-b", "sbxb1"); ev != "start" {
		t.Fatalf("cred-b's first watch while cred-a is at its bound: %s", ev)
	}
}

// forgedWatcherFile is a watcher's file of dir as the sandbox could write
// it: n entries of 10 bytes ("abcd":[], the smallest an entry can be).
func forgedWatcherFile(dir string, n int) string {
	const alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	var f strings.Builder
	f.WriteString(`{"dir":"` + dir + `","depth":1,"entries":{`)
	for i := range n {
		if i > 0 {
			f.WriteByte(',')
		}
		f.WriteString(`"` + string([]byte{alphabet[i%62], alphabet[i/62%62], alphabet[i/62/62%62], alphabet[i/62/62/62%62]}) + `":[]`)
	}
	f.WriteString(`}}`)
	return f.String()
}

// TestWatcherFileOverTheEntryBound: a watcher's file the sandbox wrote
// with more entries than any listing the gateway keeps
// (max_listing_entries), which its byte bound lets through when the
// entries are small, is WATCHER_NOT_FOUND, and decoding it stops at the
// bound: before, every entry was decoded, diffed and answered (420,000
// events from 4 MiB, 292 MiB allocated for one call).
func TestWatcherFileOverTheEntryBound(t *testing.T) {
	e := newTestEnv(t, extended)
	dir := "/home/user/w"
	if err := os.MkdirAll(e.hostPath(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	max := e.handler.cfg.MaxListingEntries
	for _, c := range []struct {
		n    int
		code int
	}{{max, 200}, {max + 1, 404}} {
		id := fmt.Sprintf("%032x", c.n)
		e.writeFile(path.Join(e.handler.cfg.ProcessDir, id+".watch"), forgedWatcherFile(dir, c.n))
		code, body := watcherCall(e, "GetWatcherEvents", fmt.Sprintf(`{"watcherId":%q}`, id))
		if code != c.code || (c.code == 404 && !strings.Contains(body, "WATCHER_NOT_FOUND")) {
			t.Fatalf("a watcher file of %d entries: %d %.200s", c.n, code, body)
		}
	}
	// The largest file its byte bound lets through.
	n := int(e.handler.watcherLimit()-64) / 10
	b := []byte(forgedWatcherFile(dir, n))
	var ok bool
	alloc := memtest.AllocatedDuring(func() { _, _, _, ok = decodeWatcher(b, max) })
	t.Logf("decoding a watcher file of %d KiB, %d entries, allocated %d KiB", len(b)>>10, n, alloc>>10)
	if ok || alloc > 2*uint64(len(b))+8<<20 {
		t.Fatalf("decodeWatcher of %d entries: ok %v, allocated %d bytes", n, ok, alloc)
	}
}

// TestWatchStreamHoldsItsNamesOnly: what a watch keeps between polls is
// its listing's names, not execd's answer: a one-entry listing padded to
// nearly max_listing_size (a long created_at, which the gateway skips)
// costs each stream a few KiB. Before, the kept name was a part of a
// buffer as long as the answer (execd's decoder), and each stream held
// 4 MiB for its life, outside any upstream slot.
func TestWatchStreamHoldsItsNamesOnly(t *testing.T) {
	if !memtest.InOwnProcess(t) {
		return
	}
	pad := int(execd.DefaultMaxListingBytes) - 4<<10
	body := `[{"path":"/home/user/a","type":"file","size":1,"modified_at":"2026-12-01T06:31:43Z","created_at":"` +
		strings.Repeat("c", pad) + `","owner":"root","group":"root","mode":644}]`
	const n = maxWatchStreamsPerSandbox
	// Each stream's first listing is answered; its later polls wait for
	// the end of the test, so none holds an answer when the heap is
	// measured: what is left is what the streams keep between polls.
	var listed atomic.Int32
	answer := func(r *http.Request) (*http.Response, error) {
		if listed.Add(1) > n {
			<-r.Context().Done()
			return nil, r.Context().Err()
		}
		return cannedExecd(body).RoundTrip(r)
	}
	e := newTestEnvDeps(t, func(d *Deps) { d.Execd = &execd.Client{Transport: roundTripFunc(answer)} }, extended)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	liveHeap()
	base := liveHeap()
	for range n {
		_, r := e.openWatch(ctx, watchMsg("/home/user", false), nil)
		if ev := nextWatch(t, r); ev != "start" {
			t.Fatalf("first event %q", ev)
		}
	}
	now := liveHeap()
	held := now - min(base, now)
	t.Logf("%d watch streams of a one-entry directory whose listing is %d KiB hold %d KiB", n, len(body)>>10, held>>10)
	if per := held / n; per > 256<<10 {
		t.Fatalf("each watch stream of a one-entry directory holds %d KiB", per>>10)
	}
}

// roundTripFunc is an http.RoundTripper of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
