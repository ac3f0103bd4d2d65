package credential

import (
	"context"
	"testing"
)

// TestProjectWideField: projectWide is read from the file, false when
// absent, and only an explicit true makes a credential project-wide.
func TestProjectWideField(t *testing.T) {
	f, _ := openFile(t, `credentials:
  - {id: admin, enabled: true, projectNamespace: p, clusterId: c, projectWide: true}
  - {id: user, enabled: true, projectNamespace: p, clusterId: c}
  - {id: explicit-no, enabled: true, projectNamespace: p, clusterId: c, projectWide: false}
`, nil)
	for id, want := range map[string]bool{"admin": true, "user": false, "explicit-no": false} {
		c, err := f.Lookup(context.Background(), id)
		if err != nil || c.ProjectWide != want {
			t.Errorf("Lookup(%s) = %+v, %v; want projectWide %v", id, c, err, want)
		}
	}
}

// TestSees is the ownership rule every sandbox route and the data-plane
// authorizer apply.
func TestSees(t *testing.T) {
	own := Credential{ID: "a", Enabled: true, ProjectNamespace: "p", ClusterID: "c"}
	wide := Credential{ID: "w", Enabled: true, ProjectNamespace: "p", ClusterID: "c", ProjectWide: true}
	for _, tc := range []struct {
		name               string
		c                  Credential
		owner, ns, cluster string
		want               bool
	}{
		{"creator", own, "a", "p", "c", true},
		{"another credential's sandbox", own, "b", "p", "c", false},
		{"no recorded owner", own, "", "p", "c", false},
		{"owner ID differing in case", own, "A", "p", "c", false},
		{"creator, other namespace", own, "a", "q", "c", false},
		{"creator, other cluster", own, "a", "p", "d", false},
		{"project-wide, another's sandbox", wide, "b", "p", "c", true},
		{"project-wide, no recorded owner", wide, "", "p", "c", true},
		{"project-wide, other namespace", wide, "b", "q", "c", false},
		{"project-wide, other cluster", wide, "b", "p", "d", false},
		{"zero credential", Credential{}, "", "", "", false},
	} {
		if got := tc.c.Sees(tc.owner, tc.ns, tc.cluster); got != tc.want {
			t.Errorf("%s: Sees = %v, want %v", tc.name, got, tc.want)
		}
	}
}
