package machineserver

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sandgate/sandgate/node/machine"
	"github.com/sandgate/sandgate/node/release"
	"github.com/sandgate/sandgate/nodecore/credential"
	"github.com/sandgate/sandgate/nodecore/enrolment"
	"github.com/sandgate/sandgate/nodecore/pool"
	"github.com/sandgate/sandgate/nodecore/releasestore"
)

const (
	inst = "11111111-2222-4333-8444-555555555555"
)

var fp = strings.Repeat("f", 64)

type world struct {
	t        *testing.T
	srv      *httptest.Server
	store    *releasestore.Store
	pools    *pool.Registry
	enrol    *enrolment.Store
	enrolDir string
	logs     *observer.ObservedLogs
	digests  map[string]string // source → specification digest
	images   map[string][]byte // source → image bytes
	secrets  []string
}

// publish writes and publishes release source with an image of size n.
func (w *world) publish(source string, n int) {
	w.t.Helper()
	dir := filepath.Join(w.t.TempDir(), source)
	_ = os.Mkdir(dir, 0o755)
	img := bytes.Repeat([]byte(source[len(source)-1:]), n)
	_ = os.WriteFile(filepath.Join(dir, "image.tar"), img, 0o644)
	_ = os.WriteFile(filepath.Join(dir, "provider.json"), []byte(`{"provider":"docker","image_ref":"sandgate-test/busybox:1"}`), 0o644)
	raw, err := release.Build(source, dir, map[release.Kind]string{release.KindImage: "image.tar", release.KindProviderSpec: "provider.json"})
	if err != nil {
		w.t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(dir, "manifest.json"), raw, 0o644)
	if _, err := w.store.Publish(dir); err != nil {
		w.t.Fatal(err)
	}
	w.digests[source] = release.Digest(raw)
	w.images[source] = img
}

// newWorld: releases rel-7 and rel-8 and rel-x; pool default binds 7 (rel-7) and
// 8 (rel-8), target 8 serving 7; pool other binds 1 (rel-x), target 1;
// pool bare binds generation 3 by digest only.
func newWorld(t *testing.T) *world {
	t.Helper()
	dir := t.TempDir()
	w := &world{t: t, digests: map[string]string{}, images: map[string][]byte{}}
	var err error
	if w.store, err = releasestore.OpenStore(filepath.Join(dir, "releases")); err != nil {
		t.Fatal(err)
	}
	w.publish("rel-7", 1000)
	w.publish("rel-8", 3000)
	w.publish("rel-x", 10)
	if w.pools, err = pool.Open(""); err != nil {
		t.Fatal(err)
	}
	if _, err := w.pools.Configure(map[string]pool.Spec{
		"default": {Bindings: []pool.Binding{{Generation: 7, SpecificationDigest: w.digests["rel-7"], Source: "rel-7"},
			{Generation: 8, SpecificationDigest: w.digests["rel-8"], Source: "rel-8"}}, Target: 8, Serving: 7},
		"other": {Bindings: []pool.Binding{{Generation: 1, SpecificationDigest: w.digests["rel-x"], Source: "rel-x"}}, Target: 1},
		"bare":  {Bindings: []pool.Binding{{Generation: 3, SpecificationDigest: strings.Repeat("3c", 32)}}, Target: 3},
	}); err != nil {
		t.Fatal(err)
	}
	w.enrolDir = filepath.Join(dir, "state")
	_ = os.Mkdir(w.enrolDir, 0o700)
	if w.enrol, err = enrolment.Open(filepath.Join(w.enrolDir, "enrolment.json"), nil); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.DebugLevel)
	w.logs = logs
	h := &Handler{Credentials: w.enrol, Pools: w.pools, Releases: w.store, Enrolment: w.enrol, Logger: zap.New(core)}
	w.srv = httptest.NewServer(h)
	t.Cleanup(func() {
		w.srv.Close()
		for _, e := range logs.All() {
			line, _ := json.Marshal(e.ContextMap())
			for _, s := range w.secrets {
				if strings.Contains(e.Message+string(line), s) {
					t.Errorf("a secret was logged: %s %s", e.Message, line)
				}
			}
		}
	})
	return w
}

func (w *world) token(p string) string {
	w.t.Helper()
	tok, _, err := w.enrol.Issue(p, time.Hour)
	if err != nil {
		w.t.Fatal(err)
	}
	w.secrets = append(w.secrets, tok)
	return tok
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (w *world) do(method, path, auth string, header map[string]string, body string) answer {
	w.t.Helper()
	req, _ := http.NewRequestWithContext(w.t.Context(), method, w.srv.URL+path, strings.NewReader(body))
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, s := range w.secrets {
		if bytes.Contains(b, []byte(s)) && !(method == http.MethodPost && path == machine.EnrolPath) {
			w.t.Errorf("%s %s: the answer echoes a secret", method, path)
		}
	}
	return answer{resp.StatusCode, resp.Header, b}
}

func (a answer) errorCode() string { return machine.DecodeError(bytes.NewReader(a.body)).Error }

func enrolBody(token string) string {
	return `{"enrolment_token": "` + token + `", "installation_id": "` + inst + `", "provider": "docker",
	  "backend_fingerprint": "` + fp + `", "max_active": 4, "max_retained": 8}`
}

var jsonCT = map[string]string{"Content-Type": "application/json"}

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// TestEnrolmentFlow is a node's whole first start: preview with the
// token, download and verify the enrolled runtime with the token, enrol,
// read the configuration with the credential, fetch a generation's
// runtime, and download with the credential.
func TestEnrolmentFlow(t *testing.T) {
	w := newWorld(t)
	tok := w.token("default")

	a := w.do(http.MethodGet, machine.EnrolPath, tok, nil, "")
	if a.status != 200 {
		t.Fatalf("preview: %d %s", a.status, a.body)
	}
	pv, err := machine.DecodeEnrolPreview(bytes.NewReader(a.body))
	if err != nil {
		t.Fatal(err)
	}
	if pv.Pool != "default" || pv.Enrolled.DeploymentGeneration != 7 || pv.Enrolled.SpecificationDigest != w.digests["rel-7"] ||
		pv.Deployment.Generation != 8 || len(pv.Runtimes) != 2 || pv.Runtimes[0].Source != "rel-7" || pv.Runtimes[1].Generation != 8 {
		t.Fatalf("%+v", pv)
	}
	// Download and verify the enrolled runtime with the token.
	a = w.do(http.MethodGet, pv.Runtimes[0].ManifestURL, tok, nil, "")
	m, err := release.VerifyManifest(a.body, pv.Enrolled.SpecificationDigest, "rel-7")
	if a.status != 200 || err != nil || a.header.Get("ETag") != `"sha256:`+w.digests["rel-7"]+`"` {
		t.Fatalf("manifest: %d %v %v", a.status, err, a.header)
	}
	img, _ := m.Of(release.KindImage)
	a = w.do(http.MethodGet, machine.ArtifactURL("rel-7", img.Name), tok, nil, "")
	if a.status != 200 || img.Verify(bytes.NewReader(a.body)) != nil || a.header.Get("ETag") != `"sha256:`+img.SHA256+`"` {
		t.Fatalf("image: %d", a.status)
	}
	// An interrupted download resumes with a Range request (If-Range on
	// the ETag).
	a = w.do(http.MethodGet, machine.ArtifactURL("rel-7", img.Name), tok, map[string]string{"Range": "bytes=600-",
		"If-Range": `"sha256:` + img.SHA256 + `"`}, "")
	if a.status != http.StatusPartialContent || !bytes.Equal(a.body, w.images["rel-7"][600:]) {
		t.Fatalf("range: %d %d bytes", a.status, len(a.body))
	}
	// The preview and the downloads did not use the token.
	a = w.do(http.MethodPost, machine.EnrolPath, "", jsonCT, enrolBody(tok))
	if a.status != http.StatusCreated {
		t.Fatalf("enrol: %d %s", a.status, a.body)
	}
	er, err := machine.DecodeEnrolResponse(bytes.NewReader(a.body))
	if err != nil || er.Pool != "default" {
		t.Fatalf("%+v %v", er, err)
	}
	w.secrets = append(w.secrets, er.Credential)

	// Configuration with the credential.
	a = w.do(http.MethodGet, machine.ConfigPath+"?node_id="+er.NodeID, er.Credential, nil, "")
	c, err := machine.DecodeConfig(bytes.NewReader(a.body))
	if a.status != 200 || err != nil {
		t.Fatalf("config: %d %v %s", a.status, err, a.body)
	}
	if c.NodeID != er.NodeID || c.Enrolled.DeploymentGeneration != 7 || c.Deployment.Generation != 8 ||
		*c.Deployment.ServingGeneration != 7 || len(c.Runtimes) != 2 {
		t.Fatalf("%+v", c)
	}
	// Restart recovery asks for one exact generation.
	a = w.do(http.MethodGet, machine.ConfigPath+"?node_id="+er.NodeID+"&generation=8", er.Credential, nil, "")
	c, err = machine.DecodeConfig(bytes.NewReader(a.body))
	if a.status != 200 || err != nil || len(c.Runtimes) != 1 || c.Runtimes[0].Source != "rel-8" {
		t.Fatalf("generation 8: %d %v %+v", a.status, err, c)
	}
	a = w.do(http.MethodGet, machine.ConfigPath+"?node_id="+er.NodeID+"&generation=9", er.Credential, nil, "")
	if a.status != 404 || a.errorCode() != machine.CodeGenerationUnknown {
		t.Fatalf("generation 9: %d %s", a.status, a.body)
	}
	// Downloads with the credential.
	hdr := map[string]string{machine.NodeIDHeader: er.NodeID}
	a = w.do(http.MethodGet, machine.ManifestURL("rel-8"), er.Credential, hdr, "")
	if _, err := release.VerifyManifest(a.body, w.digests["rel-8"], "rel-8"); a.status != 200 || err != nil {
		t.Fatalf("rel-8 manifest: %d %v", a.status, err)
	}
	a = w.do(http.MethodHead, machine.ArtifactURL("rel-8", "image.tar"), er.Credential, hdr, "")
	if a.status != 200 || a.header.Get("Content-Length") != "3000" {
		t.Fatalf("HEAD: %d %v", a.status, a.header)
	}

	// The token is used: preview, downloads and a second enrolment are
	// refused alike, and nothing more is written.
	state := filepath.Join(w.enrolDir, "enrolment.json")
	before, _ := os.ReadFile(state)
	for _, a := range []answer{
		w.do(http.MethodGet, machine.EnrolPath, tok, nil, ""),
		w.do(http.MethodPost, machine.EnrolPath, "", jsonCT, enrolBody(tok)),
		w.do(http.MethodGet, machine.ManifestURL("rel-7"), tok, nil, ""),
	} {
		if a.status != 401 || a.errorCode() != machine.CodeEnrolmentRefused {
			t.Fatalf("used token: %d %s", a.status, a.body)
		}
	}
	after, _ := os.ReadFile(state)
	if !bytes.Equal(before, after) {
		t.Fatal("a refused enrolment wrote the state")
	}
}

// TestRefusals: each refusal with its status and code, and no enrolment
// recorded by any of them.
func TestRefusals(t *testing.T) {
	w := newWorld(t)
	tok := w.token("default")
	bare := w.token("bare")
	other := w.token("other")
	e, err := w.enrol.Enrol(w.token("default"), enrolment.Request{InstallationID: inst, Provider: "docker",
		BackendFingerprint: fp, MaxActive: 1}, func(string) (enrolment.Generation, error) {
		return enrolment.Generation{Generation: 7, SpecificationDigest: w.digests["rel-7"]}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	w.secrets = append(w.secrets, e.Credential)
	id := e.Node.NodeID
	hdr := map[string]string{machine.NodeIDHeader: id}
	state := filepath.Join(w.enrolDir, "enrolment.json")
	before, _ := os.ReadFile(state)
	// unknown differs from tok in its first character (tok is random: a
	// fixed "A" was tok itself once in 64 runs).
	unknown := "A" + tok[1:]
	if tok[0] == 'A' {
		unknown = "B" + tok[1:]
	}
	for _, tc := range []struct {
		name         string
		method, path string
		auth         string
		header       map[string]string
		body         string
		status       int
		code         string
	}{
		{"enrol without content type", "POST", machine.EnrolPath, "", nil, enrolBody(tok), 415, machine.CodeUnsupportedMediaType},
		{"enrol malformed", "POST", machine.EnrolPath, "", jsonCT, `{"enrolment_token": 1}`, 400, machine.CodeInvalidRequest},
		{"enrol unknown member", "POST", machine.EnrolPath, "", jsonCT, strings.Replace(enrolBody(tok), `"max_active"`, `"pool": "other", "max_active"`, 1), 400, machine.CodeInvalidRequest},
		{"enrol too large", "POST", machine.EnrolPath, "", jsonCT, enrolBody(tok) + strings.Repeat(" ", machine.MaxBody), 413, machine.CodeRequestTooLarge},
		{"enrol unknown token", "POST", machine.EnrolPath, "", jsonCT, enrolBody(unknown), 401, machine.CodeEnrolmentRefused},
		{"enrol into a pool without a release", "POST", machine.EnrolPath, "", jsonCT, enrolBody(bare), 503, machine.CodeDeploymentUnavailable},
		{"preview without a token", "GET", machine.EnrolPath, "", nil, "", 401, machine.CodeEnrolmentRefused},
		{"preview of a pool without a release", "GET", machine.EnrolPath, bare, nil, "", 503, machine.CodeDeploymentUnavailable},
		{"enrol method", "PUT", machine.EnrolPath, "", nil, "", 405, machine.CodeMethodNotAllowed},
		{"config wrong credential", "GET", machine.ConfigPath + "?node_id=" + id, tok, nil, "", 401, machine.CodeUnauthorized},
		{"config no credential", "GET", machine.ConfigPath + "?node_id=" + id, "", nil, "", 401, machine.CodeUnauthorized},
		{"config no node_id", "GET", machine.ConfigPath, e.Credential, nil, "", 400, machine.CodeInvalidRequest},
		{"config two node_ids", "GET", machine.ConfigPath + "?node_id=" + id + "&node_id=" + id, e.Credential, nil, "", 400, machine.CodeInvalidRequest},
		{"config bad generation", "GET", machine.ConfigPath + "?node_id=" + id + "&generation=-1", e.Credential, nil, "", 400, machine.CodeInvalidRequest},
		{"config unknown parameter", "GET", machine.ConfigPath + "?node_id=" + id + "&x=1", e.Credential, nil, "", 400, machine.CodeInvalidRequest},
		{"config method", "POST", machine.ConfigPath, "", nil, "", 405, machine.CodeMethodNotAllowed},
		{"download of another pool's release with a token", "GET", machine.ManifestURL("rel-x"), tok, nil, "", 404, machine.CodeNotFound},
		{"download of another pool's release with a credential", "GET", machine.ManifestURL("rel-x"), e.Credential, hdr, "", 404, machine.CodeNotFound},
		{"download with another pool's token", "GET", machine.ManifestURL("rel-7"), other, nil, "", 404, machine.CodeNotFound},
		{"download of an undeclared file", "GET", machine.ArtifactURL("rel-7", "seccomp.json"), tok, nil, "", 404, machine.CodeNotFound},
		{"download traversal", "GET", machine.ReleasesPrefix + "rel-7/..%2f..%2fenrolment.json", tok, nil, "", 404, machine.CodeNotFound},
		{"download without source", "GET", machine.ReleasesPrefix + "rel-7", tok, nil, "", 404, machine.CodeNotFound},
		{"download wrong credential", "GET", machine.ManifestURL("rel-7"), tok, hdr, "", 401, machine.CodeUnauthorized},
		{"download no auth", "GET", machine.ManifestURL("rel-7"), "", nil, "", 401, machine.CodeEnrolmentRefused},
		{"download method", "POST", machine.ManifestURL("rel-7"), tok, nil, "", 405, machine.CodeMethodNotAllowed},
	} {
		a := w.do(tc.method, tc.path, tc.auth, tc.header, tc.body)
		if a.status != tc.status || a.errorCode() != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, a.status, a.body, tc.status, tc.code)
		}
	}
	after, _ := os.ReadFile(state)
	if !bytes.Equal(before, after) {
		t.Fatal("a refusal wrote the enrolment state")
	}
	// The tokens were not used by the refusals.
	for _, tk := range []string{tok, bare, other} {
		if _, err := w.enrol.Check(tk); err != nil {
			t.Fatalf("a token was used by a refusal: %v", err)
		}
	}
	// A disabled-by-absence node: an unknown node ID is refused like a
	// wrong credential.
	a := w.do(http.MethodGet, machine.ConfigPath+"?node_id=0e000000-0000-4000-8000-00000000000e", e.Credential, nil, "")
	if a.status != 401 {
		t.Fatalf("unknown node: %d", a.status)
	}
}

// TestDamagedStore: an artifact whose size no longer matches is not
// served (500 release_damaged), and a missing one is 404.
func TestDamagedStore(t *testing.T) {
	w := newWorld(t)
	tok := w.token("default")
	if err := os.WriteFile(filepath.Join(w.store.Dir(), "rel-7", "image.tar"), []byte("short"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := w.do(http.MethodGet, machine.ArtifactURL("rel-7", "image.tar"), tok, nil, "")
	if a.status != 500 || a.errorCode() != machine.CodeReleaseDamaged {
		t.Fatalf("%d %s", a.status, a.body)
	}
	_ = os.Remove(filepath.Join(w.store.Dir(), "rel-7", "image.tar"))
	a = w.do(http.MethodGet, machine.ArtifactURL("rel-7", "image.tar"), tok, nil, "")
	if a.status != 404 {
		t.Fatalf("%d %s", a.status, a.body)
	}
}

// TestEnrolmentOff: without an enroller the enrolment routes answer 503
// and token downloads 401.
func TestEnrolmentOff(t *testing.T) {
	w := newWorld(t)
	h := &Handler{Credentials: credential.Merged{}, Pools: w.pools, Releases: w.store}
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + machine.EnrolPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("%d", resp.StatusCode)
	}
}

// TestExpiredToken: a token past its expiry is refused by the preview,
// the enrolment and the downloads alike (401 enrolment_refused), and
// nothing is written.
func TestExpiredToken(t *testing.T) {
	w := newWorld(t)
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	store, err := enrolment.Open(filepath.Join(w.enrolDir, "expiring.json"), clock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(&Handler{Credentials: store, Pools: w.pools, Releases: w.store, Enrolment: store})
	defer srv.Close()
	w.srv = srv
	tok, _, err := store.Issue("default", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	w.secrets = append(w.secrets, tok)
	if a := w.do(http.MethodGet, machine.EnrolPath, tok, nil, ""); a.status != 200 {
		t.Fatalf("before expiry: %d", a.status)
	}
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	state := filepath.Join(w.enrolDir, "expiring.json")
	before, _ := os.ReadFile(state)
	for _, a := range []answer{
		w.do(http.MethodGet, machine.EnrolPath, tok, nil, ""),
		w.do(http.MethodPost, machine.EnrolPath, "", jsonCT, enrolBody(tok)),
		w.do(http.MethodGet, machine.ManifestURL("rel-7"), tok, nil, ""),
	} {
		if a.status != 401 || a.errorCode() != machine.CodeEnrolmentRefused {
			t.Fatalf("expired token: %d %s", a.status, a.body)
		}
	}
	after, _ := os.ReadFile(state)
	if !bytes.Equal(before, after) || len(store.Records()) != 0 {
		t.Fatal("a refused enrolment wrote the state")
	}
}
