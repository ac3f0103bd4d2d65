package integration

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/integration/execdstub"
	"github.com/sandgate/sandgate/integration/harness"
)

// TestListOnExecdV1018: files.list gives the same answer on execd v1.0.18
// (no /directories/list; its /files/search lists regular files only) as on
// execd HEAD, at depth 1 and 2, with both SDKs: directories, empty ones
// included, and a symlink to a file (shown as a file with its target, as
// envd shows it), with every field the SDK shows but the link's own size,
// owner, group and time, which v1.0.18 cannot tell (docs/dataplane.md
// "Symlinks").
func TestListOnExecdV1018(t *testing.T) {
	const dir = "/home/user/listing"
	build := func(e *testEnv) {
		e.mkdir(dir + "/m/deep")
		for p, content := range map[string]string{"a.txt": "A", ".hidden": "h", "m/b.txt": "BB", "m/deep/c.txt": "C"} {
			if err := os.WriteFile(e.host(dir+"/"+p), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		e.mkdir(dir + "/empty")
		e.mkdir(dir + "/m/empty2")
		if err := os.Symlink("a.txt", e.host(dir+"/link")); err != nil {
			t.Fatal(err)
		}
	}
	head := startEnv(t)
	build(head)
	// The same tree, the same times: the v1.0.18 execd serves head's root.
	v1018 := startEnv(t, func(c *harness.Config) { c.ExecdVersion = execdstub.Version1018; c.SandboxRoot = head.Root })
	for _, pkg := range sdkPackages {
		t.Run(pkg, func(t *testing.T) {
			var want, got struct{ Depth1, Depth2 attempt }
			head.runSDK(t, pkg, "list", sbxOK, &want, "SCENARIO_DIR="+dir)
			v1018.runSDK(t, pkg, "list", sbxOK, &got, "SCENARIO_DIR="+dir)
			for name, pair := range map[string][2]attempt{"depth 1": {want.Depth1, got.Depth1}, "depth 2": {want.Depth2, got.Depth2}} {
				if !pair[0].OK || !pair[1].OK {
					t.Fatalf("%s: HEAD %+v, v1.0.18 %+v", name, pair[0].Error, pair[1].Error)
				}
				var w, g []map[string]any
				_ = json.Unmarshal(pair[0].Value, &w)
				_ = json.Unmarshal(pair[1].Value, &g)
				for _, e := range w {
					if e["name"] == "link" && (e["size"] != float64(len("a.txt")) || e["owner"] != "root" || e["symlinkTarget"] != head.host(dir+"/a.txt")) {
						t.Errorf("%s on HEAD: the link %v, want its own size %d, owner root and target %s", name, e, len("a.txt"), head.host(dir+"/a.txt"))
					}
				}
				for _, l := range [][]map[string]any{w, g} {
					for _, e := range l {
						if e["name"] == "link" {
							delete(e, "size")
							delete(e, "owner")
							delete(e, "group")
							delete(e, "modifiedTime")
						}
					}
				}
				if !reflect.DeepEqual(w, g) {
					t.Errorf("%s on v1.0.18:\n%s\non HEAD:\n%s", name, pair[1].Value, pair[0].Value)
				}
			}
			var d2 []struct{ Name, Type string }
			_ = json.Unmarshal(got.Depth2.Value, &d2)
			var names []string
			for _, e := range d2 {
				names = append(names, e.Type+":"+e.Name)
			}
			if want := "file:.hidden file:a.txt dir:empty file:link dir:m file:b.txt dir:deep dir:empty2"; strings.Join(names, " ") != want {
				t.Errorf("depth 2 = %s, want %s", strings.Join(names, " "), want)
			}
		})
	}
}
