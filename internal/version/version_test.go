package version

import "testing"

func TestGet(t *testing.T) {
	defer func(c, tm, m string) { commit, time, modified = c, tm, m }(commit, time, modified)
	const sha = "6658b6a5889cb76b4f02d3ab98ba558cb5d8a135"
	cases := []struct {
		commit, time, modified string
		want                   string
	}{
		{"", "", "", "sandgate commit unknown (built without hack/version.sh)"},
		{"6658b6a", "", "", "sandgate commit unknown (built without hack/version.sh)"},
		{sha + "\n", "", "", "sandgate commit unknown (built without hack/version.sh)"},
		{sha, "2026-12-01T06:17:28+00:00", "false", "sandgate commit " + sha + " (2026-12-01T06:17:28+00:00)"},
		{sha, "2026-12-01T06:17:28+00:00", "true", "sandgate commit " + sha + " (2026-12-01T06:17:28+00:00) with uncommitted changes"},
		{sha, "", "yes", "sandgate commit " + sha},
	}
	for _, c := range cases {
		commit, time, modified = c.commit, c.time, c.modified
		if got := Get().String(); got != c.want {
			t.Errorf("commit=%q time=%q modified=%q: %q, want %q", c.commit, c.time, c.modified, got, c.want)
		}
	}
}
