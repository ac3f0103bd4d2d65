package admin

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/node/release"
	"github.com/sandgate/sandgate/nodecore/enrolment"
	"github.com/sandgate/sandgate/nodecore/pool"
	"github.com/sandgate/sandgate/nodecore/releasestore"
)

type state struct {
	reg   *pool.Registry
	store *releasestore.Store
	enrol *enrolment.Store
}

func (s state) Pools() *pool.Registry         { return s.reg }
func (s state) Releases() *releasestore.Store { return s.store }

func (s state) Enrolment() Enrolments {
	if s.enrol == nil {
		return nil
	}
	return s.enrol
}

var d7 = strings.Repeat("7a", 32)

// newServer returns a server over a registry with pool default (7 bound,
// target 7) and a store holding release rel-8, and the statefile path.
func newServer(t *testing.T) (*httptest.Server, state, string) {
	t.Helper()
	dir := t.TempDir()
	statePath := filepath.Join(dir, "pools.json")
	reg, err := pool.Open(statePath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Configure(map[string]pool.Spec{"default": {Bindings: []pool.Binding{{Generation: 7, SpecificationDigest: d7}}, Target: 7}}); err != nil {
		t.Fatal(err)
	}
	store, err := releasestore.OpenStore(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "rel")
	_ = os.Mkdir(src, 0o755)
	_ = os.WriteFile(filepath.Join(src, "image.tar"), []byte("img"), 0o644)
	_ = os.WriteFile(filepath.Join(src, "provider.json"), []byte(`{"provider":"docker","image_ref":"a:1"}`), 0o644)
	raw, err := release.Build("rel-8", src, map[release.Kind]string{release.KindImage: "image.tar", release.KindProviderSpec: "provider.json"})
	if err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(src, "manifest.json"), raw, 0o644)
	if _, err := store.Publish(src); err != nil {
		t.Fatal(err)
	}
	enrol, err := enrolment.Open(filepath.Join(dir, "enrolment.json"), nil)
	if err != nil {
		t.Fatal(err)
	}
	st := state{reg, store, enrol}
	srv := httptest.NewServer(&Handler{State: func() State { return st }})
	t.Cleanup(srv.Close)
	return srv, st, statePath
}

func do(t *testing.T, method, url, body string, out any) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("%s %s: Content-Type %q", method, url, resp.Header.Get("Content-Type"))
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
	}
	return resp.StatusCode
}

func TestSetDeploymentFromRelease(t *testing.T) {
	srv, st, _ := newServer(t)
	rel, _ := st.store.Release("rel-8")
	var res DeploymentResponse
	status := do(t, http.MethodPut, srv.URL+PoolsPath+"/default/deployment",
		`{"generation": 8, "release": "rel-8", "serving_generation": 7}`, &res)
	if status != http.StatusOK || res.Deployment.Generation != 8 || res.Deployment.SpecificationDigest != rel.Digest ||
		res.Deployment.ServingGeneration == nil || *res.Deployment.ServingGeneration != 7 {
		t.Fatalf("%d %+v", status, res)
	}
	if b, ok := st.reg.Binding("default", 8); !ok || b.Source != "rel-8" {
		t.Fatalf("binding %+v", b)
	}
	// Flip serving to 8: the generation is bound, nothing else is needed.
	status = do(t, http.MethodPut, srv.URL+PoolsPath+"/default/deployment", `{"generation": 8, "serving_generation": 8}`, &res)
	if status != http.StatusOK || *res.Deployment.ServingGeneration != 8 {
		t.Fatalf("%d %+v", status, res)
	}
	var pools Pools
	if do(t, http.MethodGet, srv.URL+PoolsPath, "", &pools) != http.StatusOK || len(pools.Pools) != 1 ||
		len(pools.Pools[0].Generations) != 2 || pools.Pools[0].Deployment.Generation != 8 {
		t.Fatalf("%+v", pools)
	}
	var one pool.Status
	if do(t, http.MethodGet, srv.URL+PoolsPath+"/default", "", &one) != http.StatusOK || one.Name != "default" {
		t.Fatalf("%+v", one)
	}
	if do(t, http.MethodGet, srv.URL+PoolsPath+"/default/deployment", "", &res) != http.StatusOK || res.Deployment.Generation != 8 {
		t.Fatalf("%+v", res)
	}
}

func TestSetDeploymentRefusals(t *testing.T) {
	srv, st, statePath := newServer(t)
	before, _ := os.ReadFile(statePath)
	url := srv.URL + PoolsPath + "/default/deployment"
	for _, tc := range []struct {
		name, method, url, body string
		status                  int
		code, detail            string
	}{
		{"serving omitted", http.MethodPut, url, `{"generation": 7}`, 400, "invalid_request", "missing member /serving_generation"},
		{"unknown member", http.MethodPut, url, `{"generation": 7, "serving_generation": null, "image": "x"}`, 400, "invalid_request", "unknown member at /image"},
		{"zero generation", http.MethodPut, url, `{"generation": 0, "serving_generation": null}`, 400, "invalid_request", "positive"},
		{"both", http.MethodPut, url, `{"generation": 9, "serving_generation": null, "release": "rel-8", "specification_digest": "` + d7 + `"}`, 400, "invalid_request", "not both"},
		{"unbound", http.MethodPut, url, `{"generation": 9, "serving_generation": null}`, 409, "generation_unbound", "generation 9"},
		{"rebinding", http.MethodPut, url, `{"generation": 7, "serving_generation": null, "release": "rel-8"}`, 409, "generation_conflict", "generation 7"},
		{"missing release", http.MethodPut, url, `{"generation": 9, "serving_generation": null, "release": "rel-9"}`, 404, "release_not_found", "rel-9"},
		{"unknown pool", http.MethodPut, srv.URL + PoolsPath + "/gpu/deployment", `{"generation": 7, "serving_generation": null}`, 404, "not_found", "no such pool"},
		{"method", http.MethodPost, url, `{}`, 405, "method_not_allowed", "PUT"},
		{"too large", http.MethodPut, url, `{"generation": 7, "serving_generation": null}` + strings.Repeat(" ", MaxBody), 413, "request_too_large", ""},
		{"path", http.MethodGet, srv.URL + PoolsPath + "/default/other", "", 404, "not_found", ""},
	} {
		var e Error
		if status := do(t, tc.method, tc.url, tc.body, &e); status != tc.status || e.Error != tc.code || !strings.Contains(e.Detail, tc.detail) {
			t.Errorf("%s: %d %+v", tc.name, status, e)
		}
	}
	after, _ := os.ReadFile(statePath)
	if string(before) != string(after) {
		t.Fatal("a refusal changed the state file")
	}
	if d, _ := st.reg.Deployment("default"); d.Generation != 7 || d.ServingGeneration != nil {
		t.Fatalf("%+v", d)
	}
}

func TestUnconfigured(t *testing.T) {
	srv := httptest.NewServer(&Handler{State: func() State { return nil }})
	defer srv.Close()
	var e Error
	if status := do(t, http.MethodGet, srv.URL+PoolsPath, "", &e); status != http.StatusServiceUnavailable || e.Error != "unavailable" {
		t.Fatalf("%d %+v", status, e)
	}
}

func TestIssueToken(t *testing.T) {
	srv, st, _ := newServer(t)
	var res TokenResponse
	status := do(t, http.MethodPost, srv.URL+TokensPath, `{"pool": "default", "ttl": "30m"}`, &res)
	if status != http.StatusCreated || len(res.EnrolmentToken) != 43 || res.Pool != "default" ||
		time.Until(res.ExpiresAt) > 30*time.Minute || time.Until(res.ExpiresAt) < 28*time.Minute {
		t.Fatalf("%d %+v", status, res)
	}
	if p, err := st.enrol.Check(res.EnrolmentToken); err != nil || p != "default" {
		t.Fatalf("%q %v", p, err)
	}
	for _, tc := range []struct {
		name, method, body string
		status             int
		code               string
	}{
		{"unknown pool", http.MethodPost, `{"pool": "gpu"}`, 404, "not_found"},
		{"bad ttl", http.MethodPost, `{"pool": "default", "ttl": "forever"}`, 400, "invalid_request"},
		{"long ttl", http.MethodPost, `{"pool": "default", "ttl": "800h"}`, 400, "invalid_request"},
		{"no pool", http.MethodPost, `{"ttl": "1h"}`, 400, "invalid_request"},
		{"unknown member", http.MethodPost, `{"pool": "default", "uses": 2}`, 400, "invalid_request"},
		{"method", http.MethodGet, ``, 405, "method_not_allowed"},
	} {
		var e Error
		if status := do(t, tc.method, srv.URL+TokensPath, tc.body, &e); status != tc.status || e.Error != tc.code {
			t.Errorf("%s: %d %+v", tc.name, status, e)
		}
	}
}

func TestEnrolledNodes(t *testing.T) {
	srv, st, _ := newServer(t)
	tok, _, _ := st.enrol.Issue("default", time.Hour)
	e, err := st.enrol.Enrol(tok, enrolment.Request{InstallationID: "11111111-2222-4333-8444-555555555555", Provider: "docker",
		BackendFingerprint: strings.Repeat("f", 64), MaxActive: 1}, func(string) (enrolment.Generation, error) {
		return enrolment.Generation{Generation: 7, SpecificationDigest: d7}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	id := e.Node.NodeID
	var list EnrolledNodes
	if status := do(t, http.MethodGet, srv.URL+EnrolledPath, "", &list); status != 200 || len(list.Nodes) != 1 || !list.Nodes[0].Enabled {
		t.Fatalf("%d %+v", status, list)
	}
	var rec enrolment.Record
	if status := do(t, http.MethodPost, srv.URL+EnrolledPath+"/"+id+"/disable", "", &rec); status != 200 || rec.Enabled {
		t.Fatalf("%d %+v", status, rec)
	}
	if status := do(t, http.MethodPost, srv.URL+EnrolledPath+"/"+id+"/enable", "", &rec); status != 200 || !rec.Enabled {
		t.Fatalf("%d %+v", status, rec)
	}
	req, _ := http.NewRequest(http.MethodDelete, srv.URL+EnrolledPath+"/"+id, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("%v %v", resp, err)
	}
	resp.Body.Close()
	var er Error
	for _, tc := range []struct{ method, path string }{
		{http.MethodDelete, EnrolledPath + "/" + id},
		{http.MethodPost, EnrolledPath + "/" + id + "/disable"},
		{http.MethodPost, EnrolledPath + "/" + id + "/other"},
	} {
		if status := do(t, tc.method, srv.URL+tc.path, "", &er); status != 404 || er.Error != "not_found" {
			t.Errorf("%s %s: %d %+v", tc.method, tc.path, status, er)
		}
	}
	if status := do(t, http.MethodPut, srv.URL+EnrolledPath, "", &er); status != 405 {
		t.Errorf("PUT list: %d", status)
	}
}

// TestEnrolmentOff: without a state_dir (no enrolment store) the token and
// enrolled-node routes answer 503 unavailable.
func TestEnrolmentOff(t *testing.T) {
	_, st, _ := newServer(t)
	st.enrol = nil
	srv := httptest.NewServer(&Handler{State: func() State { return st }})
	defer srv.Close()
	var e Error
	if status := do(t, http.MethodPost, srv.URL+TokensPath, `{"pool": "default"}`, &e); status != 503 || e.Error != "unavailable" {
		t.Fatalf("%d %+v", status, e)
	}
	if status := do(t, http.MethodGet, srv.URL+EnrolledPath, "", &e); status != 503 || e.Error != "unavailable" {
		t.Fatalf("%d %+v", status, e)
	}
}
