package execd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/memtest"
)

// linkRecord is one record as linkScript prints it.
func linkRecord(p, info, target string) string { return p + "\x00" + info + "\x00" + target + "\x00" }

// TestParseLinks: the script's records become Links by relative path (the
// type letter, the mode field's permission bits with setuid, setgid and
// sticky read as x or not, the target); anything the script does not
// print is KindUnexpected, and more records than allowed too.
func TestParseLinks(t *testing.T) {
	out := linkRecord("./a", "f-rw-r-----", "/home/user/d/t.txt") +
		linkRecord("./sub/b", "ddrwsr-S--T.", "/home/user/e") +
		linkRecord("./c", "o-rwxrwsrwt+", "") +
		linkRecord("./gone", "n", "") +
		linkRecord("./new\nline", "fprw-------@", "/x\ny") + "\n"
	got, err := ParseLinks([]byte(out), 5)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Link{
		"a":         {Type: TypeFile, Perm: 0o640, Target: "/home/user/d/t.txt"},
		"sub/b":     {Type: TypeDirectory, Perm: 0o740, Target: "/home/user/e"},
		"c":         {Type: TypeOther, Perm: 0o777},
		"gone":      {},
		"new\nline": {Type: TypeFile, Perm: 0o600, Target: "/x\ny"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if got, err := ParseLinks(nil, 0); err != nil || len(got) != 0 {
		t.Fatalf("no output: %v %v", got, err)
	}
	if _, err := ParseLinks([]byte(out), 4); !isUnexpected(err) || !strings.Contains(err.Error(), "max_listing_entries") {
		t.Fatalf("5 records, 4 allowed: %v", err)
	}
	for _, bad := range []string{
		"x", // no NUL
		linkRecord("./a", "f-rw-r-----", "/t")[:12], // cut
		linkRecord("a", "f-rw-r-----", "/t"),        // not ./
		linkRecord("./", "f-rw-r-----", "/t"),       // empty
		linkRecord("./a/../b", "f-rw-r-----", "/t"),
		linkRecord("./../a", "f-rw-r-----", "/t"),
		linkRecord("./..", "f-rw-r-----", "/t"),
		linkRecord("./.", "f-rw-r-----", "/t"),
		linkRecord(".//", "f-rw-r-----", "/t"),
		linkRecord(".//a", "f-rw-r-----", "/t"),
		linkRecord("./a/./b", "f-rw-r-----", "/t"),
		linkRecord("./a//b", "f-rw-r-----", "/t"),
		linkRecord("./a/", "f-rw-r-----", "/t"),
		linkRecord("./a", "l-rw-r-----", "/t"),   // a type letter it does not print
		linkRecord("./a", "f-rw-r--", "/t"),      // short mode
		linkRecord("./a", "f-rw-r-----xy", "/t"), // long mode
		linkRecord("./a", "fxrw-r-----", "/t"),   // file type letter
		linkRecord("./a", "f-rw-r----?", "/t"),   // trailing letter
		linkRecord("./a", "f-rq-r-----", "/t"),   // permission letter
		linkRecord("./a", "f-rwt------", "/t"),   // t only for others
		linkRecord("./a", "f-r-x---s--", "/t"),   // s not for others
		linkRecord("./a", "f-rw-r-----", "t"),    // relative target
		linkRecord("./a", "n", "/t"),             // nothing resolved, yet a target
		linkRecord("./a", "", ""),
		linkRecord("./a", "f-rw-r-----", "/t") + "x",
	} {
		if _, err := ParseLinks([]byte(bad), 10); !isUnexpected(err) {
			t.Errorf("%q: error %v, want KindUnexpected", bad, err)
		}
	}
}

func isUnexpected(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == KindUnexpected
}

// FuzzParseLinks: whatever the sandbox prints in the script's place,
// ParseLinks returns no more records than allowed, keys that are clean
// relative paths (below the listed directory), types the script names, permission bits only, targets empty
// or absolute; and records written back from what it returned parse to
// the same.
func FuzzParseLinks(f *testing.F) {
	f.Add([]byte(linkRecord("./a", "f-rw-r-----", "/home/user/d/t.txt")+linkRecord("./b", "n", "")+"\n"), 3)
	f.Add([]byte(linkRecord("./sub/b", "ddrwsr-S--T.", "/e")), 1)
	f.Add([]byte(linkRecord("./c", "o-rwxrwsrwt+", "")), 0)
	f.Fuzz(func(t *testing.T, out []byte, max int) {
		got, err := ParseLinks(out, max)
		if err != nil {
			if !isUnexpected(err) {
				t.Fatalf("error %v, want KindUnexpected", err)
			}
			return
		}
		if len(got) > max && len(got) > 0 {
			t.Fatalf("%d links, %d allowed", len(got), max)
		}
		var again bytes.Buffer
		keys := make([]string, 0, len(got))
		for k := range got {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			l := got[k]
			rel := k
			if rel == "." || !fs.ValidPath(rel) {
				t.Fatalf("key %q not below the directory", k)
			}
			if l.Perm&^0o777 != 0 || l.Target != "" && l.Target[0] != '/' {
				t.Fatalf("%q: %+v", k, l)
			}
			info := "n"
			switch l.Type {
			case "":
				if l.Perm != 0 || l.Target != "" {
					t.Fatalf("%q: nothing resolved, %+v", k, l)
				}
			case TypeFile, TypeDirectory, TypeOther:
				info = string(map[string]byte{TypeFile: 'f', TypeDirectory: 'd', TypeOther: 'o'}[l.Type]) + "-"
				for i := range 9 {
					if l.Perm&(1<<(8-i)) != 0 {
						info += string("rwxrwxrwx"[i])
					} else {
						info += "-"
					}
				}
			default:
				t.Fatalf("%q: type %q", k, l.Type)
			}
			again.WriteString(linkRecord("./"+rel, info, l.Target))
		}
		back, err := ParseLinks(again.Bytes(), len(got))
		if err != nil || !reflect.DeepEqual(back, got) {
			t.Fatalf("written back %q: %+v, %v; want %+v", again.Bytes(), back, err, got)
		}
	})
}

// TestLinkScript runs linkScript with sh in a directory of symlinks, as
// execd would: each symlink down to the depth, its target's type and
// permission bits with every link followed, the target resolved;
// dangling links and loops resolve to nothing; names with quotes, "$(…)",
// a leading dash and a newline are read from the file system, never run;
// a name with "\r" is left out; symlinks to directories are not entered.
func TestLinkScript(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(root, "d")
	for _, p := range []string{"d/sub/s2", "e"} {
		if err := os.MkdirAll(filepath.Join(root, p), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(d, "t.txt"), []byte("x\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(d, "t.txt"), 0o4640); err != nil {
		t.Fatal(err)
	}
	pwned := filepath.Join(d, "pwned") // what the names' commands would make, run in d
	for name, target := range map[string]string{
		"link.txt": "t.txt", "linkdir": "../e", "chain": "link.txt", "dangling": "missing", "loop1": "loop2", "loop2": "loop1",
		"abs": filepath.Join(root, "e"), "we'ird $(touch pwned) `touch pwned`": "t.txt", "-n": "t.txt",
		"nl\nlink": "t.txt", "cr\rlink": "t.txt", "sub/inner": "../t.txt", ".hidden": "t.txt", "..dots": "sub",
	} {
		if err := os.Symlink(target, filepath.Join(d, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../inner", filepath.Join(d, "sub", "s2", "far")); err != nil {
		t.Fatal(err)
	}
	run := func(depth string) map[string]Link {
		cmd := exec.Command("sh", "-c", "set -- "+Quote(depth)+"\n"+linkScript)
		cmd.Dir = d
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("depth %s: %v", depth, err)
		}
		links, err := ParseLinks(append(out, '\n'), 100)
		if err != nil {
			t.Fatalf("depth %s: %v: %q", depth, err, out)
		}
		return links
	}
	file := Link{Type: TypeFile, Perm: 0o640, Target: filepath.Join(d, "t.txt")}
	dir := Link{Type: TypeDirectory, Perm: 0o750, Target: filepath.Join(root, "e")}
	want := map[string]Link{
		"link.txt": file, "linkdir": dir, "chain": file, "dangling": {},
		"loop1": {}, "loop2": {}, "abs": dir,
		"we'ird $(touch pwned) `touch pwned`": file, "-n": file,
		"nl\nlink": file, ".hidden": file,
		"..dots": {Type: TypeDirectory, Perm: 0o750, Target: filepath.Join(d, "sub")},
	}
	if got := run("1"); !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", " ")
		w, _ := json.MarshalIndent(want, "", " ")
		t.Fatalf("depth 1:\n%s\nwant\n%s", g, w)
	}
	want["sub/inner"] = file
	if got := run("2"); !reflect.DeepEqual(got, want) {
		t.Fatalf("depth 2: %+v", got)
	}
	want["sub/s2/far"] = file
	if got := run("3"); !reflect.DeepEqual(got, want) {
		t.Fatalf("depth 3: %+v", got)
	}
	if _, err := os.Lstat(pwned); err == nil {
		t.Fatal("a name ran as a command")
	}
}

// TestResolveLinksMalformed: a listing with a symlink costs one command,
// whose output the script does not print (what code in the sandbox can
// answer for execd) is KindUnexpected, the listing refused; and a script
// that fails is KindExecd.
func TestResolveLinksMalformed(t *testing.T) {
	var commands int
	var text string
	exit := `{"type":"execution_complete"}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/directories/list"):
			_, _ = io.WriteString(w, `[{"path":"/d/l","type":"symlink","size":1,"mode":777}]`)
		case strings.HasSuffix(r.URL.Path, "/command"):
			commands++
			var req CommandRequest
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Cwd != "/d" || !strings.Contains(req.Command, linkScript) {
				t.Errorf("command %+v (%v)", req, err)
			}
			ev, _ := json.Marshal(Event{Type: EventStdout, Text: text})
			_, _ = io.WriteString(w, `{"type":"init","text":"9f1c2e4b7a6d4e0f8b3c5d2a1e0f7c6b"}`+"\n\n"+string(ev)+"\n\n"+exit+"\n\n")
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	fe, _ := url.Parse(srv.URL)
	c, tgt := &Client{}, Target{FixedEntry: fe, SandboxID: "sb1"}
	text = linkRecord("./l", "f-rw-r--r--", "/d/t")
	list, err := c.ListDirectory(context.Background(), tgt, "/d", 1)
	if err != nil || len(list) != 1 || list[0].Link == nil || *list[0].Link != (Link{Type: TypeFile, Perm: 0o644, Target: "/d/t"}) || commands != 1 {
		t.Fatalf("list %+v, error %v, %d commands", list, err, commands)
	}
	for _, bad := range []string{"garbage", linkRecord("./l", "f-rw-r--r--", "t"), linkRecord("/etc/l", "n", "")} {
		text = bad
		if _, err := c.ListDirectory(context.Background(), tgt, "/d", 1); !isUnexpected(err) {
			t.Errorf("%q: %v, want KindUnexpected", bad, err)
		}
	}
	text, exit = "", `{"type":"error","error":{"ename":"CommandExecError","evalue":"2","traceback":[]}}`
	var e *Error
	if _, err := c.ListDirectory(context.Background(), tgt, "/d", 1); !errors.As(err, &e) || e.Kind != KindExecd {
		t.Fatalf("a failed script: %v", err)
	}
}

// TestResolveLinksCostIsTheOutputs: what the sandbox answers for the
// symlink command costs the gateway according to that answer's size, not
// the listed directory's length times its records. Code in the sandbox
// can list one symlink and answer the command with max_listing_entries
// records of a few bytes (here 16,384 records, about 400 KiB of events);
// keyed by absolute path, each record held the directory's path again,
// 4,096 bytes (resolvePath's bound) making 64 MiB of keys out of 160 KiB
// of output. The listing of a 4,000-byte directory may allocate at most
// 1 MiB more than that of "/d".
func TestResolveLinksCostIsTheOutputs(t *testing.T) {
	var out strings.Builder
	out.WriteString(linkRecord("./l", "f-rw-r--r--", "/t"))
	for i := range DefaultMaxListingEntries - 1 {
		out.WriteString(linkRecord("./"+strconv.Itoa(i), "n", ""))
	}
	ev, _ := json.Marshal(Event{Type: EventStdout, Text: out.String()})
	answer := []byte(`{"type":"init","text":"9f1c2e4b7a6d4e0f8b3c5d2a1e0f7c6b"}` + "\n\n" + string(ev) + "\n\n" + `{"type":"execution_complete"}` + "\n\n")
	var listing []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/directories/list"):
			_, _ = w.Write(listing)
		case strings.HasSuffix(r.URL.Path, "/command"):
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = w.Write(answer)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	fe, _ := url.Parse(srv.URL)
	c, tgt := &Client{}, Target{FixedEntry: fe, SandboxID: "sb1"}
	cost := func(dir string) uint64 {
		listing, _ = json.Marshal([]map[string]any{{"path": dir + "/l", "type": "symlink", "size": 1, "mode": 777}})
		list, err := c.ListDirectory(context.Background(), tgt, dir, 1) // the connection's first use
		if err != nil || len(list) != 1 || list[0].Link == nil || *list[0].Link != (Link{Type: TypeFile, Perm: 0o644, Target: "/t"}) {
			t.Fatalf("%.20s…: %+v, %v", dir, list, err)
		}
		return memtest.AllocatedDuring(func() {
			if _, err := c.ListDirectory(context.Background(), tgt, dir, 1); err != nil {
				t.Error(err)
			}
		})
	}
	short, long := cost("/d"), cost("/d/"+strings.Repeat("x", 4000))
	t.Logf("the listing of /d allocated %d KiB, of a 4,000-byte directory %d KiB", short>>10, long>>10)
	if long > short+1<<20 {
		t.Fatalf("the listing of a 4,000-byte directory allocated %d KiB, %d KiB more than that of /d", long>>10, (long-short)>>10)
	}
}
