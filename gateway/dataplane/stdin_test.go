package dataplane

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/gateway/admission"
	"github.com/sandgate/sandgate/gateway/execd"
	"github.com/sandgate/sandgate/integration/execdstub"
)

// stdinStart starts cmd (bash -c) with stdin: true and returns its pid and
// the stream's frame reader.
func stdinStart(t *testing.T, e *testEnv, cmd string, stdin bool) (uint32, func(kinds ...string) (string, map[string]any)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-c", cmd}}, "stdin": stdin})
	_, r := e.openStream(ctx, "Start", string(msg), nil)
	_, start := nextEvent(t, r, "start")
	return uint32(start["pid"].(float64)), func(kinds ...string) (string, map[string]any) { return nextEvent(t, r, kinds...) }
}

// sendStdin sends b with SendInput's input.stdin (a unary call: its
// outcome is taken; a stream's may come first, which these tests do not
// look at).
func sendStdin(e *testEnv, pid uint32, b []byte) (int, string) {
	resp, body := e.processCall("SendInput", fmt.Sprintf(`{"process":{"pid":%d},"input":{"stdin":%q}}`, pid, base64.StdEncoding.EncodeToString(b)))
	e.waitOutcome()
	return resp.StatusCode, string(body)
}

func closeStdin(e *testEnv, pid uint32) (int, string) {
	resp, body := e.processCall("CloseStdin", fmt.Sprintf(`{"process":{"pid":%d}}`, pid))
	e.waitOutcome()
	return resp.StatusCode, string(body)
}

// holdersOf lists the processes with a descriptor open on a path ending in
// suffix (the stdin FIFOs of one process): none once the process has ended.
func holdersOf(suffix string) []string {
	var out []string
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && strings.Contains(l, suffix) {
			out = append(out, fd+" -> "+l)
		}
	}
	return out
}

// TestStdinSendAndClose: a process started with stdin: true reads what
// SendInput writes, every byte value exactly (NUL, "%", "\", quotes, bytes
// over 0x7f), in order across two calls; CloseStdin gives it end of file
// after them, so `cat` ends with 0; afterwards its stdin is gone: SendInput
// is PROCESS_NOT_FOUND once it has ended, and no process keeps its FIFOs.
func TestStdinSendAndClose(t *testing.T) {
	e := newTestEnv(t, extended)
	pid, next := stdinStart(t, e, "cat; echo; echo cat-ended-$?", true)
	var all []byte
	for i := range 256 {
		all = append(all, byte(i))
	}
	first := append([]byte(`%s %% \n \\ ' " $HOME `), all...)
	second := []byte("second line\n")
	for _, b := range [][]byte{first, second} {
		if code, body := sendStdin(e, pid, b); code != 200 || body != "{}" {
			t.Fatalf("SendInput: %d %s", code, body)
		}
	}
	if code, body := closeStdin(e, pid); code != 200 || body != "{}" {
		t.Fatalf("CloseStdin: %d %s", code, body)
	}
	want := string(first) + string(second) + "\ncat-ended-0\n"
	var got strings.Builder
	for got.Len() < len(want) {
		kind, ev := next("data", "end")
		if kind != "data" {
			t.Fatalf("%s before all output: got %q", kind, got.String())
		}
		got.WriteString(b64(t, ev["stdout"]))
	}
	if got.String() != want {
		t.Fatalf("the command read\n%q\nwant\n%q", got.String(), want)
	}
	if kind, end := next("end"); kind != "end" || end["exitCode"] != nil && end["exitCode"] != 0.0 {
		t.Fatalf("end: %s %v", kind, end)
	}
	if code, body := sendStdin(e, pid, []byte("late")); code != 404 || !strings.Contains(body, string(CodeProcessNotFound)) {
		t.Fatalf("SendInput after the end: %d %s", code, body)
	}
	e.waitFor("no process holding the stdin FIFOs", func() bool { return len(holdersOf(fmt.Sprintf("/%d.", pid))) == 0 })
}

// TestStdinLarge: input over one script's chunk (stdinChunkBytes) arrives
// whole and in order: 300 KiB of random bytes, hashed by the command.
func TestStdinLarge(t *testing.T) {
	b := make([]byte, 300<<10)
	_, _ = rand.Read(b)
	wantStdinArrives(t, b)
}

// wantStdinArrives sends b to the stdin of a command that hashes it,
// closes the stdin, and checks the command printed b's sha256.
func wantStdinArrives(t *testing.T, b []byte) {
	t.Helper()
	e := newTestEnv(t, extended)
	pid, next := stdinStart(t, e, "sha256sum | cut -d' ' -f1", true)
	if code, body := sendStdin(e, pid, b); code != 200 {
		t.Fatalf("SendInput of %d bytes: %d %s", len(b), code, body)
	}
	if code, body := closeStdin(e, pid); code != 200 {
		t.Fatalf("CloseStdin: %d %s", code, body)
	}
	sum := sha256.Sum256(b)
	if kind, ev := next("data", "end"); kind != "data" || b64(t, ev["stdout"]) != hex.EncodeToString(sum[:])+"\n" {
		t.Fatalf("%s %v, want the input's sha256 %x", kind, ev, sum)
	}
}

// TestStdinRefusals: a process started without stdin takes none
// (STDIN_UNAVAILABLE, as envd's "stdin not enabled or closed") and closing
// it succeeds, as in envd; a closed stdin takes no more and closing it
// again succeeds; a PTY's stdin is refused both ways; an unknown pid is
// PROCESS_NOT_FOUND. Nothing of the refused input reaches the command.
func TestStdinRefusals(t *testing.T) {
	e := newTestEnv(t, extended)
	noStdin, _ := stdinStart(t, e, "sleep 30", false)
	if code, body := sendStdin(e, noStdin, []byte("x")); code != 400 || !strings.Contains(body, `"code":"failed_precondition"`) ||
		!strings.Contains(body, string(CodeStdinUnavailable)) || !strings.Contains(body, "not enabled or closed") {
		t.Fatalf("SendInput without stdin: %d %s", code, body)
	}
	if code, body := closeStdin(e, noStdin); code != 200 || body != "{}" {
		t.Fatalf("CloseStdin without stdin: %d %s", code, body)
	}

	pid, next := stdinStart(t, e, "cat; echo eof; sleep 30", true)
	if code, body := closeStdin(e, pid); code != 200 {
		t.Fatalf("CloseStdin: %d %s", code, body)
	}
	if kind, ev := next("data"); kind != "data" || b64(t, ev["stdout"]) != "eof\n" {
		t.Fatalf("after CloseStdin: %s %v", kind, ev)
	}
	if code, body := sendStdin(e, pid, []byte("after close")); code != 400 || !strings.Contains(body, string(CodeStdinUnavailable)) {
		t.Fatalf("SendInput after CloseStdin: %d %s", code, body)
	}
	if code, body := closeStdin(e, pid); code != 200 {
		t.Fatalf("CloseStdin again: %d %s", code, body)
	}

	pctx, pcancel := context.WithCancel(context.Background())
	defer pcancel()
	// Up to its first output: the terminal's shell runs (the stand-in
	// execd reports a session running once its shell has started), so
	// the refusals below are the PTY's, not a process not yet running.
	ptyPID, _ := ptyStartReady(t, e, pctx, nil)
	if code, body := sendStdin(e, ptyPID, []byte("x")); code != 400 || !strings.Contains(body, "input.pty") {
		t.Fatalf("stdin on a PTY: %d %s", code, body)
	}
	if code, body := closeStdin(e, ptyPID); code != 400 || !strings.Contains(body, "Ctrl+D") {
		t.Fatalf("CloseStdin on a PTY: %d %s", code, body)
	}
	if code, body := closeStdin(e, 4242); code != 404 || !strings.Contains(body, string(CodeProcessNotFound)) {
		t.Fatalf("CloseStdin of an unknown pid: %d %s", code, body)
	}
}

// TestStdinKilledLeavesNoHolder: a process killed while its stdin is open
// (SIGKILL through SendSignal, execd's process-group kill) leaves no
// process holding its FIFOs, and a command that ends without reading its
// stdin ends its holder too.
func TestStdinKilledLeavesNoHolder(t *testing.T) {
	e := newTestEnv(t, extended)
	pid, next := stdinStart(t, e, "echo up; sleep 30", true)
	if kind, _ := next("data"); kind != "data" {
		t.Fatalf("first event %s", kind)
	}
	if len(holdersOf(fmt.Sprintf("/%d.in", pid))) == 0 {
		t.Fatal("no process holds the stdin FIFO of a running process")
	}
	killAndWaitEnd(t, e, pid, next)
	e.waitFor("no process holding the killed process's stdin FIFOs", func() bool { return len(holdersOf(fmt.Sprintf("/%d.", pid))) == 0 })

	pid2, next2 := stdinStart(t, e, "echo no reading", true)
	if kind, _ := next2("end"); kind != "end" {
		t.Fatalf("second: %s", kind)
	}
	e.waitFor("no process holding the ended process's stdin FIFOs", func() bool { return len(holdersOf(fmt.Sprintf("/%d.", pid2))) == 0 })
}

// TestPrintfFormat: appendPrintfFormat's text, given to the shells execd
// may run (bash and dash, the two printf builtins), prints exactly the
// bytes it encodes: every byte value, random bytes, and text that starts
// with "-", which printf would read as an option (TestStdinLarge failed
// once in CI when a chunk of its random input started with one).
func TestPrintfFormat(t *testing.T) {
	var all []byte
	for i := range 256 {
		all = append(all, byte(i), 'a', byte(255-i))
	}
	rnd := make([]byte, 4096)
	_, _ = rand.Read(rnd)
	for _, sh := range []string{"bash", "dash"} {
		if _, err := exec.LookPath(sh); err != nil {
			t.Fatalf("%s: %v (both shells are on this project's machines)", sh, err)
		}
		for _, b := range [][]byte{all, rnd, []byte("%s%d%%\\\\n\\0"), []byte("-x"), []byte("--"), []byte("-v a b"), nil} {
			out, err := exec.Command(sh, "-c", `printf "$1"`, sh, string(appendPrintfFormat(nil, b))).Output()
			if err != nil || !bytes.Equal(out, b) {
				t.Fatalf("%s printed %q (%v), want %q", sh, out, err, b)
			}
		}
	}
	for _, n := range []int{0, 1, stdinChunkBytes / 4, stdinChunkBytes, 3*stdinChunkBytes + 7} {
		b := bytes.Repeat([]byte{0xff}, n)
		var joined []byte
		buf := make([]byte, 0, stdinChunkBytes)
		for rest := b; len(rest) > 0; {
			var c []byte
			c, rest = nextStdinChunk(buf, rest)
			if len(c) > stdinChunkBytes || len(c) == 0 {
				t.Fatalf("a chunk of %d bytes, over %d or empty", len(c), stdinChunkBytes)
			}
			if cap(c) != stdinChunkBytes {
				t.Fatalf("a chunk in a buffer of its own (capacity %d)", cap(c))
			}
			joined = append(joined, c...)
		}
		if !bytes.Equal(joined, appendPrintfFormat(nil, b)) {
			t.Fatalf("%d bytes: the chunks are not the format in order", n)
		}
	}
}

// unescapePrintf reads a format appendPrintfFormat wrote back into bytes,
// as printf does (only the forms appendPrintfFormat writes); ok is false on
// anything else.
func unescapePrintf(f []byte) (out []byte, ok bool) {
	for i := 0; i < len(f); i++ {
		switch c := f[i]; {
		case c == '%':
			if i+1 >= len(f) || f[i+1] != '%' {
				return nil, false
			}
			out, i = append(out, '%'), i+1
		case c == '\\':
			switch {
			case i+1 < len(f) && f[i+1] == '\\':
				out, i = append(out, '\\'), i+1
			case i+3 < len(f) && f[i+1] >= '0' && f[i+1] <= '3' && f[i+2] >= '0' && f[i+2] <= '7' && f[i+3] >= '0' && f[i+3] <= '7':
				out, i = append(out, (f[i+1]-'0')<<6|(f[i+2]-'0')<<3|(f[i+3]-'0')), i+3
			default:
				return nil, false
			}
		case c < 0x20 || c >= 0x7f || c == '-' || c == '\'':
			return nil, false
		default:
			out = append(out, c)
		}
	}
	return out, true
}

// FuzzStdinChunks: whatever the input, its chunks are in order, each within
// stdinChunkBytes and none empty, made only of printable ASCII without "-"
// and "'" (a shell word, an argument with no NUL, never read as an option,
// single-quoted by execd.Shell at two bytes more), and
// read back as printf reads them they are the input.
func FuzzStdinChunks(f *testing.F) {
	for _, s := range []string{"", "a", "-x", "%s\\n", "\x00\xff\x7f\x1f", strings.Repeat("\xfe", stdinChunkBytes/4+1), strings.Repeat("'", stdinChunkBytes)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got []byte
		buf := make([]byte, 0, stdinChunkBytes)
		for rest := b; len(rest) > 0; {
			var c []byte
			c, rest = nextStdinChunk(buf, rest)
			if len(c) == 0 || len(c) > stdinChunkBytes {
				t.Fatalf("chunk of %d bytes", len(c))
			}
			if q := execd.Quote(string(c)); len(q) > stdinChunkBytes+2 {
				t.Fatalf("a chunk of %d bytes is %d bytes single-quoted", len(c), len(q))
			}
			part, ok := unescapePrintf(c)
			if !ok {
				t.Fatalf("chunk %q is not a format appendPrintfFormat writes", c)
			}
			got = append(got, part...)
		}
		if !bytes.Equal(got, b) {
			t.Fatalf("read back %q, want %q", got, b)
		}
	})
}

// TestStdinReaderGone: a command that ends without reading its stdin
// (it sleeps 1 s and exits) while a SendInput of 1 MiB is written to it
// (its first script fills the FIFO, the second waits in it): the
// SendInput finishes instead of waiting in the full FIFO for execd's 60 s
// deadline (the wrapper reads the FIFO empty once the command has ended):
// with success while the FIFOs are still there (what nobody reads is
// dropped), or, once the process's files are removed (at once here: these
// tests' cleanup grace is 0), with PROCESS_NOT_FOUND saying the process
// ended while its stdin was written; the command ends as it does, and no
// process keeps the FIFOs.
func TestStdinReaderGone(t *testing.T) {
	e := newTestEnv(t, extended)
	pid, next := stdinStart(t, e, "sleep 1; echo read-none", true)
	if code, body := sendStdin(e, pid, bytes.Repeat([]byte("a"), 1<<20)); code != 200 &&
		(code != 404 || !strings.Contains(body, "ended while its stdin was written")) {
		t.Fatalf("SendInput: %d %s", code, body)
	}
	if kind, ev := next("data"); kind != "data" || b64(t, ev["stdout"]) != "read-none\n" {
		t.Fatalf("%s %v", kind, ev)
	}
	if kind, end := next("end"); kind != "end" || end["exitCode"] != nil && end["exitCode"] != 0.0 {
		t.Fatalf("end: %s %v", kind, end)
	}
	e.waitFor("no process holding the stdin FIFOs", func() bool { return len(holdersOf(fmt.Sprintf("/%d.", pid))) == 0 })
}

// TestStdinWriteHoldsNoUpstreamSlot: a stdin write waiting in a full FIFO
// (the command never reads) holds no slot of the gateway's upstream bound,
// so with one slot in all a ListDir is served while it waits, and does not
// wait for it; the write is still in progress then, and ends when the
// process is killed. Before, the write held its call's slot for as long
// as it waited (up to execd's 60 s), and a tenant's few blocked writes
// could take every slot of the gateway.
func TestStdinWriteHoldsNoUpstreamSlot(t *testing.T) {
	e := newTestEnv(t, extended, func(c *Config, _ *execdstub.Config) {
		c.MaxUpstreamCalls, c.UpstreamWait = 1, 2*time.Second
	})
	pid, next := stdinStart(t, e, "sleep 30", true)
	done := make(chan int, 1)
	go func() {
		req := e.request(http.MethodPost, "/process.Process/SendInput", strings.NewReader(fmt.Sprintf(`{"process":{"pid":%d},"input":{"stdin":%q}}`,
			pid, base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("z"), 300<<10)))))
		req.Header.Set("Content-Type", "application/json")
		resp, err := testClient.Do(req)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	e.waitFor("the stdin write in progress", func() bool { all, _ := e.handler.shared.stdinWrites.Held(""); return all == 1 })
	if resp, body := e.unary("ListDir", `{"path":"/home/user"}`); resp.StatusCode != 200 {
		t.Fatalf("ListDir while a stdin write waits: %d %s", resp.StatusCode, body)
	}
	select {
	case code := <-done:
		t.Fatalf("the stdin write ended (%d) before the process was killed: it did not wait", code)
	default:
	}
	resp, body := e.processCall("SendSignal", fmt.Sprintf(`{"process":{"pid":%d},"signal":"SIGNAL_SIGKILL"}`, pid))
	if resp.StatusCode != 200 {
		t.Fatalf("SendSignal: %d %s", resp.StatusCode, body)
	}
	if code := <-done; code != 200 && code != 404 {
		t.Fatalf("the stdin write after the kill: %d", code)
	}
	if kind, _ := next("end"); kind != "end" {
		t.Fatalf("after kill: %s", kind)
	}
}

// TestStdinSingleQuotes: input made of single quotes arrives as sent. Each
// "'" is escaped (4 bytes) like the other bytes that need it: kept as
// itself, execd.Shell's quoting made it 4 bytes (close, escaped quote,
// reopen) within a chunk
// budgeted at 1, so 40 KiB of them became one shell argument over Linux's
// 128 KiB, the script could not run, and SendInput failed (EXECD_PROTOCOL).
func TestStdinSingleQuotes(t *testing.T) {
	wantStdinArrives(t, bytes.Repeat([]byte("'"), 40<<10))
}

// TestStdinWriteEndsWithItsProcess: a stdin write waiting on a command that
// does not read (more than the FIFO holds) ends when the command is killed,
// PROCESS_NOT_FOUND ("ended while its stdin was written"). The kill ends
// the command's whole process group, the wrapper's drain and the holder
// with it; the write script is a writer only, so its write fails at once
// with no reader left. Before, it had opened the FIFO read-write, was a
// reader itself, and waited for execd's 60 s deadline, holding the
// sandbox's one stdin write meanwhile, then failed EXECD_FAILED.
func TestStdinWriteEndsWithItsProcess(t *testing.T) {
	e := newTestEnv(t, extended)
	pid, next := stdinStart(t, e, "sleep 30", true)
	type answer struct {
		code int
		body string
	}
	done := make(chan answer, 1)
	go func() {
		resp, body := e.processCall("SendInput", fmt.Sprintf(`{"process":{"pid":%d},"input":{"stdin":%q}}`, pid,
			base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("z"), 300<<10))))
		done <- answer{resp.StatusCode, string(body)}
	}()
	// The first script's bytes fill the FIFO: the next script waits on it
	// (or is about to) when the command is killed.
	fifo := e.hostPath(e.handler.procFiles(pid).in)
	e.waitFor("the first script's bytes in the FIFO", func() bool { return fifoHolds(t, fifo) >= stdinChunkBytes })
	killAndWaitEnd(t, e, pid, next)
	a := <-done
	e.waitOutcome()
	if a.code != 404 || !strings.Contains(a.body, "PROCESS_NOT_FOUND") || !strings.Contains(a.body, "ended while its stdin was written") {
		t.Fatalf("the write waiting on the killed command: %d %s", a.code, a.body)
	}
}

// fifoHolds is how many bytes the FIFO at the host path p holds, read
// without waiting (a reader open for the moment of the question).
func fifoHolds(t *testing.T, p string) int {
	t.Helper()
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	n, err := unix.IoctlGetInt(fd, unix.TIOCINQ) // FIONREAD
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStdinWritesPerCredential: a credential's stdin writes in progress
// are bounded over all its sandboxes (maxStdinWritesPerCredential; 1
// here), so one tenant's writes to commands that do not read cannot hold
// every place of the gateway's (maxStdinWrites) for a minute: its next
// write waits upstream_wait and is GATEWAY_BUSY at
// stdin_writes_per_credential. Before, only the sandbox and the gateway
// were counted.
func TestStdinWritesPerCredential(t *testing.T) {
	e := newTestEnv(t, extended, func(c *Config, _ *execdstub.Config) { c.UpstreamWait = 200 * time.Millisecond })
	e.handler.shared.stdinCreds = admission.New(maxStdinWrites, 1)
	pid, next := stdinStart(t, e, "sleep 30", true)
	done := make(chan int, 1)
	go func() {
		resp, _ := e.processCall("SendInput", fmt.Sprintf(`{"process":{"pid":%d},"input":{"stdin":%q}}`, pid,
			base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("z"), 300<<10))))
		done <- resp.StatusCode
	}()
	e.waitFor("the first write in progress", func() bool { all, _ := e.handler.shared.stdinCreds.Held("cred-a"); return all == 1 })
	code, body := sendStdin(e, pid, []byte("x"))
	if code != 503 || !strings.Contains(body, "GATEWAY_BUSY") || !strings.Contains(body, "this credential had") {
		t.Fatalf("a second write of the credential: %d %s", code, body)
	}
	if resp, body := e.processCall("SendSignal", fmt.Sprintf(`{"process":{"pid":%d},"signal":"SIGNAL_SIGKILL"}`, pid)); resp.StatusCode != 200 {
		t.Fatalf("SendSignal: %d %s", resp.StatusCode, body)
	}
	next("end")
	if c := <-done; c != 404 {
		t.Fatalf("the first write after the kill: %d", c)
	}
}

// killAndWaitEnd kills process pid (SIGKILL) and reads its stream (next)
// to the end event.
func killAndWaitEnd(t *testing.T, e *testEnv, pid uint32, next func(kinds ...string) (string, map[string]any)) {
	t.Helper()
	resp, body := e.processCall("SendSignal", fmt.Sprintf(`{"process":{"pid":%d},"signal":"SIGNAL_SIGKILL"}`, pid))
	if resp.StatusCode != 200 {
		t.Fatalf("SendSignal: %d %s", resp.StatusCode, body)
	}
	e.waitOutcome()
	if kind, _ := next("end"); kind != "end" {
		t.Fatalf("after the kill: %s", kind)
	}
}
