package fakecore

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/node/machine"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/node/release"
	"github.com/sandgate/sandgate/nodecore/releasestore"
)

// Machine is the stand-in's machine API (package node/machine's routes):
// the node's configuration from the fields below, the release downloads
// from a real release store (Range answered by http.ServeContent, only
// declared artifacts served), and the enrolment preview and enrolment
// with one-time tokens. Set Core.Machine before the node starts; lock Mu
// to change fields while it runs.
type Machine struct {
	// Store is the release store the downloads come from.
	Store *releasestore.Store
	// NodeID and Credential authenticate config and downloads.
	NodeID, Credential string

	// Mu guards the fields below; a test holds it to change them while
	// the server runs.
	Mu sync.Mutex
	// Pool, Enrolled and Deployment are answered by config and preview.
	Pool       string
	Enrolled   machine.Generation
	Deployment proto.Deployment
	// Runtimes maps a generation to its release source.
	Runtimes map[int64]string
	// Tokens are the unused enrolment tokens; enrol consumes one.
	Tokens map[string]bool
	// Corrupt names artifacts served with their last byte changed.
	Corrupt map[string]bool
	// Fail makes every download answer 503 while true.
	Fail bool
	// FailConfig is how many of the next authenticated configuration
	// reads answer 503 (after authentication); each decrements it.
	FailConfig int
	// DropEnrolAnswer makes the next successful enrolment register the
	// node (the token is used) and close the connection instead of
	// answering; it is cleared then.
	DropEnrolAnswer bool
	// Requests counts the download requests per path, and Served the
	// bytes served per path.
	Requests map[string]int
	Served   map[string]int64
	// Enrolled requests seen (POST enrol).
	Enrolments int
}

// NewMachine returns a Machine over a new store in a temporary directory.
func NewMachine(t testing.TB, nodeID, credential string) *Machine {
	st, err := releasestore.OpenStore(filepath.Join(t.TempDir(), "releases"))
	if err != nil {
		t.Fatal(err)
	}
	return &Machine{Store: st, NodeID: nodeID, Credential: credential, Pool: "default", Runtimes: map[int64]string{},
		Tokens: map[string]bool{}, Corrupt: map[string]bool{}, Requests: map[string]int{}, Served: map[string]int64{}}
}

// Publish builds and publishes a release source from files (kind → path)
// and returns its specification digest.
func (m *Machine) Publish(t testing.TB, source string, files map[release.Kind]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), source)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	names := map[release.Kind]string{}
	for k, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(p)
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		names[k] = name
	}
	raw, err := release.Build(source, dir, names)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, release.ManifestName), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Store.Publish(dir); err != nil {
		t.Fatal(err)
	}
	return release.Digest(raw)
}

// Bind makes generation g the release source (its digest is the
// manifest's).
func (m *Machine) Bind(t testing.TB, g int64, source string) string {
	t.Helper()
	p, err := m.Store.Release(source)
	if err != nil {
		t.Fatal(err)
	}
	m.Mu.Lock()
	defer m.Mu.Unlock()
	m.Runtimes[g] = source
	if m.Enrolled.DeploymentGeneration == 0 {
		m.Enrolled = machine.Generation{DeploymentGeneration: g, SpecificationDigest: p.Digest}
	}
	if m.Deployment.Generation == 0 {
		m.Deployment = proto.Deployment{Generation: g, SpecificationDigest: p.Digest}
	}
	return p.Digest
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := machine.Encode(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

func (m *Machine) runtimes(only int64) ([]machine.Runtime, bool) {
	var out []machine.Runtime
	gens := make([]int64, 0, len(m.Runtimes))
	for g := range m.Runtimes {
		gens = append(gens, g)
	}
	slices.Sort(gens)
	for _, g := range gens {
		if only > 0 && g != only {
			continue
		}
		src := m.Runtimes[g]
		p, err := m.Store.Release(src)
		if err != nil {
			continue
		}
		out = append(out, machine.Runtime{Generation: g, SpecificationDigest: p.Digest, Source: src, ManifestURL: machine.ManifestURL(src)})
	}
	return out, only == 0 || len(out) == 1
}

func bearer(r *http.Request) string {
	v, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return v
}

// ServeHTTP serves the machine API.
func (m *Machine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	tok := bearer(r)
	switch {
	case r.URL.Path == machine.ConfigPath && r.Method == http.MethodGet:
		if tok != m.Credential || r.URL.Query().Get("node_id") != m.NodeID {
			writeJSON(w, 401, machine.Error{Error: machine.CodeUnauthorized})
			return
		}
		if m.FailConfig > 0 {
			m.FailConfig--
			writeJSON(w, 503, machine.Error{Error: machine.CodeUnavailable})
			return
		}
		var only int64
		if s := r.URL.Query().Get("generation"); s != "" {
			only, _ = strconv.ParseInt(s, 10, 64)
		}
		rts, ok := m.runtimes(only)
		if !ok {
			writeJSON(w, 404, machine.Error{Error: machine.CodeGenerationUnknown})
			return
		}
		writeJSON(w, 200, machine.Config{NodeID: m.NodeID, Pool: m.Pool, Enrolled: m.Enrolled, Deployment: m.Deployment, Runtimes: nonNil(rts)})
	case r.URL.Path == machine.EnrolPath && r.Method == http.MethodGet:
		if !m.Tokens[tok] {
			writeJSON(w, 401, machine.Error{Error: machine.CodeEnrolmentRefused})
			return
		}
		rts, _ := m.runtimes(0)
		b, _ := machine.Encode(struct {
			Pool       string             `json:"pool"`
			Enrolled   machine.Generation `json:"enrolled"`
			Deployment proto.Deployment   `json:"deployment"`
			Runtimes   []machine.Runtime  `json:"runtimes"`
		}{m.Pool, m.Enrolled, m.Deployment, nonNil(rts)})
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	case r.URL.Path == machine.EnrolPath && r.Method == http.MethodPost:
		req, err := machine.DecodeEnrolRequest(r.Body)
		if err != nil {
			writeJSON(w, 400, machine.Error{Error: machine.CodeInvalidRequest, Detail: "malformed"})
			return
		}
		if !m.Tokens[req.EnrolmentToken] || tok != req.EnrolmentToken {
			writeJSON(w, 401, machine.Error{Error: machine.CodeEnrolmentRefused})
			return
		}
		if req.Enrolled != nil && *req.Enrolled != m.Enrolled {
			writeJSON(w, 409, machine.Error{Error: machine.CodeEnrolmentChanged})
			return
		}
		delete(m.Tokens, req.EnrolmentToken)
		m.Enrolments++
		if m.DropEnrolAnswer {
			m.DropEnrolAnswer = false
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		writeJSON(w, 201, machine.EnrolResponse{NodeID: m.NodeID, Credential: m.Credential, Pool: m.Pool})
	case strings.HasPrefix(r.URL.Path, machine.ReleasesPrefix) && r.Method == http.MethodGet:
		okCred := tok == m.Credential && r.Header.Get(machine.NodeIDHeader) == m.NodeID
		if !okCred && !m.Tokens[tok] {
			writeJSON(w, 401, machine.Error{Error: machine.CodeUnauthorized})
			return
		}
		m.Requests[r.URL.Path]++
		if m.Fail {
			writeJSON(w, 503, machine.Error{Error: machine.CodeUnavailable})
			return
		}
		source, name, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, machine.ReleasesPrefix), "/")
		if name == release.ManifestName {
			p, err := m.Store.Release(source)
			if err != nil {
				writeJSON(w, 404, machine.Error{Error: machine.CodeNotFound})
				return
			}
			m.Served[r.URL.Path] += int64(len(p.Raw))
			http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(p.Raw))
			return
		}
		f, _, err := m.Store.OpenArtifact(source, name)
		if err != nil {
			writeJSON(w, 404, machine.Error{Error: machine.CodeNotFound})
			return
		}
		defer f.Close()
		b, _ := readAll(f)
		if m.Corrupt[name] {
			b = bytes.Clone(b)
			b[len(b)-1] ^= 0xff
		}
		cw := &countWriter{ResponseWriter: w}
		http.ServeContent(cw, r, name, time.Time{}, bytes.NewReader(b))
		m.Served[r.URL.Path] += cw.n
	default:
		writeJSON(w, 404, machine.Error{Error: machine.CodeNotFound})
	}
}

func nonNil(r []machine.Runtime) []machine.Runtime {
	if r == nil {
		return []machine.Runtime{}
	}
	return r
}

func readAll(f *os.File) ([]byte, error) {
	var buf bytes.Buffer
	_, err := buf.ReadFrom(f)
	return buf.Bytes(), err
}

type countWriter struct {
	http.ResponseWriter
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n += int64(n)
	return n, err
}

// SHA256 returns the lowercase hex SHA-256 of b (test helper).
func SHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
