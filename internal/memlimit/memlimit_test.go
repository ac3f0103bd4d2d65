package memlimit

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"
)

func file(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }

func TestDecide(t *testing.T) {
	const gib = 1 << 30
	cases := []struct {
		name      string
		fs        fstest.MapFS
		env       string
		limit     int64
		container int64
		source    string
		operator  string
		wantErr   error
		anyErr    bool
	}{
		{name: "v2 container root", fs: fstest.MapFS{
			"proc/self/cgroup":         file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("2147483648\n"),
		}, limit: 2 * gib * 9 / 10, container: 2 * gib, source: "/sys/fs/cgroup/memory.max"},
		{name: "v2 nested path", fs: fstest.MapFS{
			"proc/self/cgroup":                          file("0::/kubepods/pod1/c1\n"),
			"sys/fs/cgroup/kubepods/pod1/c1/memory.max": file("1073741824\n"),
			"sys/fs/cgroup/memory.max":                  file("max\n"),
		}, limit: gib * 9 / 10, container: gib, source: "/sys/fs/cgroup/kubepods/pod1/c1/memory.max"},
		{name: "v2 max", fs: fstest.MapFS{
			"proc/self/cgroup":         file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("max\n"),
		}},
		{name: "GOMEMLIMIT wins", env: "768MiB", fs: fstest.MapFS{
			"proc/self/cgroup":         file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("2147483648\n"),
		}, operator: "768MiB"},
		{name: "v1 hybrid", fs: fstest.MapFS{
			"proc/self/cgroup": file("9:name=systemd:/\n4:memory:/job/42\n1:cpu,cpuacct:/\n0::/\n"),
			"sys/fs/cgroup/memory/job/42/memory.limit_in_bytes": file("536870912\n"),
		}, limit: 536870912 * 9 / 10, container: 536870912, source: "/sys/fs/cgroup/memory/job/42/memory.limit_in_bytes"},
		{name: "v1 unlimited", fs: fstest.MapFS{
			"proc/self/cgroup":                           file("4:memory:/\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes": file("9223372036854771712\n"),
		}},
		{name: "host path not visible: the mount's top", fs: fstest.MapFS{
			"proc/self/cgroup":         file("0::/system.slice/x.service\n"),
			"sys/fs/cgroup/memory.max": file("1073741824"),
		}, limit: gib * 9 / 10, container: gib, source: "/sys/fs/cgroup/memory.max"},
		{name: "no cgroup at all", fs: fstest.MapFS{}},
		{name: "malformed limit", fs: fstest.MapFS{
			"proc/self/cgroup":         file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("lots\n"),
		}, wantErr: ErrInvalid},
		{name: "negative limit", fs: fstest.MapFS{
			"proc/self/cgroup":         file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("-1\n"),
		}, wantErr: ErrInvalid},
		{name: "oversized limit file", fs: fstest.MapFS{
			"proc/self/cgroup":         file("0::/\n"),
			"sys/fs/cgroup/memory.max": file(strings.Repeat("1", maxLimitFile+1)),
		}, wantErr: ErrInvalid},
		{name: "oversized cgroup file", fs: fstest.MapFS{
			"proc/self/cgroup": file(strings.Repeat("x", maxCgroupFile+1)),
		}, wantErr: ErrInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Decide(tc.fs, tc.env)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Limit != tc.limit || d.Container != tc.container || d.Source != tc.source || d.Operator != tc.operator {
				t.Fatalf("decision %+v, want limit %d container %d source %q operator %q", d, tc.limit, tc.container, tc.source, tc.operator)
			}
			if d.String() == "" {
				t.Fatal("empty description")
			}
		})
	}
}

// TestApplyUnderGOMEMLIMIT: with GOMEMLIMIT set, Apply keeps it and says so.
func TestApplyUnderGOMEMLIMIT(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "1GiB")
	d, err := Apply()
	if err != nil || d.Operator != "1GiB" || d.Limit != 0 {
		t.Fatalf("Apply: %+v, %v", d, err)
	}
	if !strings.Contains(d.String(), "GOMEMLIMIT=1GiB") {
		t.Fatalf("description %q", d.String())
	}
}
