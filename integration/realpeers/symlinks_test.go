package realpeers_test

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// symlinksScript makes the directory TestListDirSymlinksAgainstTheRealExecd
// lists: a file, a symlink to it and one to that, a symlink to a directory
// outside (holding a file, which a listing must not descend to), a
// dangling symlink and a loop.
const symlinksScript = `set -e
mkdir -p /home/user/sl/d /home/user/sl/e
cd /home/user/sl/d
echo x > t.txt; chmod 640 t.txt; : > ../e/inside.txt; chmod 750 ../e
ln -s t.txt link.txt; ln -s link.txt chain; ln -s ../e linkdir; ln -s missing dangling; ln -s loop2 loop1; ln -s loop1 loop2
`

// TestListDirSymlinksAgainstTheRealExecd: through the gateway against each
// real execd, ListDir reports a symlink as envd 0.6.13 does: its target's
// type and permission bits, "Lrwxrwxrwx", symlinkTarget the target's
// absolute path with every link resolved (the link's own path for a
// dangling link or a loop, which are FILE_TYPE_UNSPECIFIED with mode 0),
// and on execd HEAD the link's own size and owner (v1.0.18's file API
// gives a symlink no metadata); a symlink to a directory is listed
// through, as envd lists it. The JS SDK 2.51's
// files.list then shows the links to the file and the directory with
// their types and targets, leaves the dangling link and the loop out as it
// does on envd, and at depth 2 does not descend into the link to the
// directory.
func TestListDirSymlinksAgainstTheRealExecd(t *testing.T) {
	requireTier(t)
	for _, version := range execdVersions {
		t.Run("execd-"+version, func(t *testing.T) {
			w.startExecd(t, version)
			id, tok := w.createSandboxAs(t, apiKey)
			execdRun(t, symlinksScript)
			status, body := listDirOf(t, id, tok, "/home/user/sl/d")
			if status != http.StatusOK {
				t.Fatalf("ListDir: %d %s", status, body)
			}
			t.Logf("ListDir: %s", body)
			var out struct{ Entries []map[string]any }
			if err := json.Unmarshal(body, &out); err != nil {
				t.Fatal(err)
			}
			type entry struct {
				Type, Permissions, SymlinkTarget, Size, Owner string
				Mode                                          float64
			}
			got := map[string]entry{}
			for _, ent := range out.Entries {
				s := func(k string) string { v, _ := ent[k].(string); return v }
				mode, _ := ent["mode"].(float64)
				got[s("name")] = entry{s("type"), s("permissions"), s("symlinkTarget"), s("size"), s("owner"), mode}
			}
			link := func(typ, target string, mode float64, size string) entry {
				e := entry{typ, "Lrwxrwxrwx", target, size, "root", mode}
				if version != "head" {
					e.Size, e.Owner = "", "" // v1.0.18: no metadata for a symlink
				}
				return e
			}
			want := map[string]entry{
				"t.txt":    {"FILE_TYPE_FILE", "-rw-r-----", "", "2", "root", 0o640},
				"link.txt": link("FILE_TYPE_FILE", "/home/user/sl/d/t.txt", 0o640, "5"),
				"chain":    link("FILE_TYPE_FILE", "/home/user/sl/d/t.txt", 0o640, "8"),
				"linkdir":  link("FILE_TYPE_DIRECTORY", "/home/user/sl/e", 0o750, "4"),
				"dangling": link("FILE_TYPE_UNSPECIFIED", "/home/user/sl/d/dangling", 0, "7"),
				"loop1":    link("FILE_TYPE_UNSPECIFIED", "/home/user/sl/d/loop1", 0, "5"),
				"loop2":    link("FILE_TYPE_UNSPECIFIED", "/home/user/sl/d/loop2", 0, "5"),
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("ListDir entries\n%+v\nwant\n%+v", got, want)
			}
			// A symlink to a directory is listed through, its entries under
			// the path asked for (execd refuses to list a symlink); one to
			// a file is NOT_A_DIRECTORY, a dangling one FILE_NOT_FOUND.
			if status, body := listDirOf(t, id, tok, "/home/user/sl/d/linkdir"); status != http.StatusOK ||
				!strings.Contains(string(body), `{"entries":[{"name":"inside.txt","type":"FILE_TYPE_FILE","path":"/home/user/sl/d/linkdir/inside.txt","mode":420,"permissions":"-rw-r--r--","owner":"root","group":"root","modifiedTime":"`) ||
				strings.Count(string(body), `"name"`) != 1 {
				t.Errorf("ListDir of a symlink to a directory: %d %s, want its one entry under the link's path", status, body)
			}
			for p, want := range map[string]string{"/home/user/sl/d/link.txt": `"message":"NOT_A_DIRECTORY: `, "/home/user/sl/d/dangling": `"message":"FILE_NOT_FOUND: `} {
				if _, body := listDirOf(t, id, tok, p); !strings.Contains(string(body), want) {
					t.Errorf("ListDir of %s: %s, want %s", p, body, want)
				}
			}

			var r struct {
				Depth1, Depth2 sdkAttempt
			}
			runScenario(t, w.gateway, "node", []string{"sdk.mjs", "list"}, filepath.Join(w.root, "integration/js"), &r,
				"E2B_PACKAGE=e2b-2.51.0", "SANDBOX_ID="+id, "SCENARIO_DIR=/home/user/sl/d")
			for _, a := range []struct {
				what string
				a    sdkAttempt
			}{{"files.list", r.Depth1}, {"files.list depth 2", r.Depth2}} {
				if !a.a.OK {
					t.Fatalf("%s: %+v", a.what, a.a.Error)
				}
				var list []map[string]any
				if err := json.Unmarshal(a.a.Value, &list); err != nil {
					t.Fatal(err)
				}
				var names []string
				for _, e := range list {
					s := func(k string) string { v, _ := e[k].(string); return v }
					names = append(names, s("name")+":"+s("type")+":"+s("symlinkTarget"))
				}
				wantNames := []string{"chain:file:/home/user/sl/d/t.txt", "link.txt:file:/home/user/sl/d/t.txt",
					"linkdir:dir:/home/user/sl/e", "t.txt:file:"}
				if !reflect.DeepEqual(names, wantNames) {
					t.Errorf("%s (JS 2.51) = %q, want %q", a.what, names, wantNames)
				}
			}

			var py sdkAttempt
			runPythonScenario(t, w.gateway, pythonInterpreter(t), "list", &py, "SANDBOX_ID="+id, "SCENARIO_DIR=/home/user/sl/d")
			wantValue(t, "files.list (Python 2.24)", py, []any{
				map[string]any{"name": "chain", "type": "file", "symlinkTarget": "/home/user/sl/d/t.txt"},
				map[string]any{"name": "link.txt", "type": "file", "symlinkTarget": "/home/user/sl/d/t.txt"},
				map[string]any{"name": "linkdir", "type": "dir", "symlinkTarget": "/home/user/sl/e"},
				map[string]any{"name": "t.txt", "type": "file", "symlinkTarget": nil},
			})
		})
	}
}
