package dataplane

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/sandgate/sandgate/integration/execdstub"
)

// TestListDirSymlinks: ListDir reports a symlink as envd does (envd 0.6.13,
// packages/shared/pkg/filesystem GetEntryInfo): the type and permission
// bits of its target with every link followed, Go's FileMode string of the
// link ("Lrwxrwxrwx"), the target's resolved absolute path in
// symlinkTarget, and, on execd HEAD, the link's own size, owner and time; a
// dangling link and a loop are FILE_TYPE_UNSPECIFIED with their own path
// as symlinkTarget and mode 0, a link to a FIFO FILE_TYPE_UNSPECIFIED with
// the FIFO's bits. It costs one command for the whole listing; a listing
// without symlinks none on HEAD (and only the listing's own on v1.0.18).
// The stand-in runs commands on the host, under its root, so the resolved
// targets here are host paths; in a sandbox they are the sandbox's
// (TestListDirSymlinksAgainstTheRealExecd).
func TestListDirSymlinks(t *testing.T) {
	for _, version := range []string{execdstub.VersionHEAD, execdstub.Version1018} {
		t.Run(version, func(t *testing.T) {
			e := newTestEnv(t, func(_ *Config, x *execdstub.Config) { x.Version = version })
			e.writeFile("/home/user/d/t.txt", "x\n")
			e.writeFile("/home/user/plain/a.txt", "a")
			if err := os.Chmod(e.hostPath("/home/user/d/t.txt"), 0o640); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(e.hostPath("/home/user/e"), 0o750); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(e.hostPath("/home/user/d/fifo"), 0o600); err != nil {
				t.Fatal(err)
			}
			for name, target := range map[string]string{"link.txt": "t.txt", "linkdir": "../e", "chain": "link.txt",
				"dangling": "missing", "loop1": "loop2", "loop2": "loop1", "fifolink": "fifo"} {
				if err := os.Symlink(target, e.hostPath("/home/user/d/"+name)); err != nil {
					t.Fatal(err)
				}
			}
			root, err := filepath.EvalSymlinks(e.root)
			if err != nil {
				t.Fatal(err)
			}
			resp, body := e.unary("ListDir", `{"path":"/home/user/d","depth":1}`)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			if n := len(e.execd.Commands()); n != map[string]int{execdstub.VersionHEAD: 1, execdstub.Version1018: 2}[version] {
				t.Fatalf("%d commands for a listing with symlinks", n)
			}
			var out struct{ Entries []map[string]any }
			if err := json.Unmarshal(body, &out); err != nil {
				t.Fatal(err)
			}
			type entry struct {
				Type, Permissions, SymlinkTarget string
				Mode                             float64
				Size                             string
			}
			got := map[string]entry{}
			for _, ent := range out.Entries {
				s := func(k string) string { v, _ := ent[k].(string); return v }
				mode, _ := ent["mode"].(float64)
				got[s("name")] = entry{s("type"), s("permissions"), s("symlinkTarget"), mode, s("size")}
				if ent["symlinkTarget"] != nil && version == execdstub.VersionHEAD && (ent["owner"] == nil || ent["modifiedTime"] == nil) {
					t.Errorf("%s: no owner or time: %v", s("name"), ent)
				}
			}
			size := func(target string) string { // the link's own size, HEAD only
				if version == execdstub.Version1018 {
					return ""
				}
				return map[string]string{"t.txt": "5", "../e": "4", "link.txt": "8", "missing": "7", "loop1": "5", "loop2": "5", "fifo": "4"}[target]
			}
			file := filepath.Join(root, "home/user/d/t.txt")
			want := map[string]entry{
				"t.txt":    {"FILE_TYPE_FILE", "-rw-r-----", "", 0o640, "2"},
				"fifo":     {"FILE_TYPE_UNSPECIFIED", "-rw-------", "", 0o600, ""}, // envd: "prw-------"; not the subject here
				"link.txt": {"FILE_TYPE_FILE", "Lrwxrwxrwx", file, 0o640, size("t.txt")},
				"chain":    {"FILE_TYPE_FILE", "Lrwxrwxrwx", file, 0o640, size("link.txt")},
				"linkdir":  {"FILE_TYPE_DIRECTORY", "Lrwxrwxrwx", filepath.Join(root, "home/user/e"), 0o750, size("../e")},
				"dangling": {"FILE_TYPE_UNSPECIFIED", "Lrwxrwxrwx", "/home/user/d/dangling", 0, size("missing")},
				"loop1":    {"FILE_TYPE_UNSPECIFIED", "Lrwxrwxrwx", "/home/user/d/loop1", 0, size("loop2")},
				"loop2":    {"FILE_TYPE_UNSPECIFIED", "Lrwxrwxrwx", "/home/user/d/loop2", 0, size("loop1")},
				"fifolink": {"FILE_TYPE_UNSPECIFIED", "Lrwxrwxrwx", filepath.Join(root, "home/user/d/fifo"), 0o600, size("fifo")},
			}
			if version == execdstub.Version1018 {
				delete(want, "fifo") // no metadata for "other" entries on v1.0.18
				delete(got, "fifo")
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got  %+v\nwant %+v\n%s", got, want, body)
			}
			// Without symlinks: no command on HEAD, the listing's own on v1.0.18.
			before := len(e.execd.Commands())
			if resp, body := e.unary("ListDir", `{"path":"/home/user/plain","depth":1}`); resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			if n := len(e.execd.Commands()) - before; n != map[string]int{execdstub.VersionHEAD: 0, execdstub.Version1018: 1}[version] {
				t.Fatalf("%d commands for a listing without symlinks", n)
			}
		})
	}
}

// TestListDirThroughASymlink: ListDir of a symlink to a directory lists
// the directory, its entries under the path asked for, as envd's does
// (execd refuses to list a symlink; the listing script lists it from
// inside), down to the depth; its own symlinks are resolved. A symlink to
// a file is NOT_A_DIRECTORY, a dangling one and a loop FILE_NOT_FOUND.
func TestListDirThroughASymlink(t *testing.T) {
	for _, version := range []string{execdstub.VersionHEAD, execdstub.Version1018} {
		t.Run(version, func(t *testing.T) {
			e := newTestEnv(t, func(_ *Config, x *execdstub.Config) { x.Version = version })
			e.writeFile("/home/user/e/inside.txt", "in")
			e.writeFile("/home/user/e/sub/deep.txt", "deep")
			e.writeFile("/home/user/f.txt", "f")
			for name, target := range map[string]string{"/home/user/linkdir": "e", "/home/user/e/back": "../f.txt",
				"/home/user/filelink": "f.txt", "/home/user/dangling": "missing", "/home/user/loop": "loop"} {
				if err := os.Symlink(target, e.hostPath(name)); err != nil {
					t.Fatal(err)
				}
			}
			root, err := filepath.EvalSymlinks(e.root)
			if err != nil {
				t.Fatal(err)
			}
			list := func(depth int) string {
				resp, body := e.unary("ListDir", `{"path":"/home/user/linkdir","depth":`+string(rune('0'+depth))+`}`)
				if resp.StatusCode != 200 {
					t.Fatalf("depth %d: %d %s", depth, resp.StatusCode, body)
				}
				var out struct{ Entries []map[string]any }
				if err := json.Unmarshal(body, &out); err != nil {
					t.Fatal(err)
				}
				var s []string
				for _, ent := range out.Entries {
					target, _ := ent["symlinkTarget"].(string)
					s = append(s, ent["type"].(string)+":"+ent["path"].(string)+":"+target)
				}
				return strings.Join(s, " ")
			}
			back := "FILE_TYPE_FILE:/home/user/linkdir/back:" + filepath.Join(root, "home/user/f.txt")
			if got, want := list(1), back+" FILE_TYPE_FILE:/home/user/linkdir/inside.txt: FILE_TYPE_DIRECTORY:/home/user/linkdir/sub:"; got != want {
				t.Fatalf("depth 1: %s\nwant %s", got, want)
			}
			if got, want := list(2), back+" FILE_TYPE_FILE:/home/user/linkdir/inside.txt: FILE_TYPE_DIRECTORY:/home/user/linkdir/sub: FILE_TYPE_FILE:/home/user/linkdir/sub/deep.txt:"; got != want {
				t.Fatalf("depth 2: %s\nwant %s", got, want)
			}
			for p, code := range map[string]Code{"/home/user/filelink": CodeNotADirectory, "/home/user/dangling": CodeFileNotFound, "/home/user/loop": CodeFileNotFound} {
				_, body := e.unary("ListDir", `{"path":"`+p+`"}`)
				var ce struct{ Message string }
				_ = json.Unmarshal(body, &ce)
				if !strings.HasPrefix(ce.Message, string(code)+": ") {
					t.Errorf("%s: %s, want %s", p, body, code)
				}
			}
		})
	}
}
