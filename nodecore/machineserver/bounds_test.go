package machineserver

// Attacks on the machine API's boundary that hold: bodies far over the
// limit are cut off after MaxBody+1 bytes, whatever their framing;
// malformed, duplicate-key and deeply nested bodies are refused without
// using the token; path and Range tricks never reach a byte outside the
// declared artifacts; a re-publish racing downloads never serves a wrong
// or partial byte.

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/node/machine"
	"github.com/sandgate/sandgate/node/release"
	"github.com/sandgate/sandgate/nodecore/pool"
)

// endless is a body of n bytes that counts how many were read.
type endless struct {
	n, read int64
	b       byte
}

func (e *endless) Read(p []byte) (int, error) {
	if e.read >= e.n {
		return 0, io.EOF
	}
	k := min(int64(len(p)), e.n-e.read)
	for i := range p[:k] {
		p[i] = e.b
	}
	e.read += k
	return int(k), nil
}

// TestOversizedEnrolmentBodiesAreReadOnlyToTheLimit: a 64 MiB body, with
// or without a Content-Length, is answered 413 after at most MaxBody+1
// bytes were read, and the token is not used.
func TestOversizedEnrolmentBodiesAreReadOnlyToTheLimit(t *testing.T) {
	w := newWorld(t)
	tok := w.token("default")
	h := w.srv.Config.Handler
	for _, length := range []int64{-1, 64 << 20} {
		// A valid start, then spaces: only the limit can refuse it.
		body := &endless{n: 64 << 20, b: ' '}
		prefix := strings.NewReader(strings.TrimSuffix(enrolBody(tok), "}"))
		req := httptest.NewRequest(http.MethodPost, machine.EnrolPath, io.MultiReader(prefix, body))
		req.ContentLength = length
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusRequestEntityTooLarge {
			t.Fatalf("Content-Length %d: %d %s", length, rec.Code, rec.Body)
		}
		if read := int64(prefix.Size()) - int64(prefix.Len()) + body.read; read > machine.MaxBody+1 {
			t.Fatalf("Content-Length %d: %d bytes read before the refusal, limit %d", length, read, machine.MaxBody+1)
		}
	}
	if _, err := w.enrol.Check(tok); err != nil {
		t.Fatalf("the token was used: %v", err)
	}
}

// TestMalformedEnrolmentBodies: each is refused 400 invalid_request, no
// token is used and nothing is written; the detail never quotes the
// token.
func TestMalformedEnrolmentBodies(t *testing.T) {
	w := newWorld(t)
	tok := w.token("default")
	valid := enrolBody(tok)
	state := filepath.Join(w.enrolDir, "enrolment.json")
	before, _ := os.ReadFile(state)
	for name, body := range map[string]string{
		"duplicate token":       strings.Replace(valid, `"installation_id"`, `"enrolment_token": "`+tok+`", "installation_id"`, 1),
		"duplicate max_active":  strings.Replace(valid, `"max_active": 4`, `"max_active": 4, "max_active": 32`, 1),
		"case-variant member":   strings.Replace(valid, `"max_active"`, `"Max_Active"`, 1),
		"null member":           strings.Replace(valid, `"max_retained": 8`, `"max_retained": null`, 1),
		"two objects":           valid + valid,
		"trailing garbage":      valid + "x",
		"array":                 "[" + valid + "]",
		"deep nesting":          strings.Repeat("[", 30000) + strings.Repeat("]", 30000),
		"deep object":           strings.TrimSuffix(valid, "}") + `, "x": ` + strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000) + "}",
		"invalid UTF-8":         strings.Replace(valid, `"docker"`, "\"dock\xffer\"", 1),
		"huge number":           strings.Replace(valid, `"max_active": 4`, `"max_active": 1e400`, 1),
		"negative max_retained": strings.Replace(valid, `"max_retained": 8`, `"max_retained": -1`, 1),
		"token of 513 bytes":    strings.Replace(valid, tok, strings.Repeat("a", 513), 1),
		"enrolled without digest": strings.TrimSuffix(valid, "}") +
			`, "enrolled": {"deployment_generation": 7}}`,
	} {
		a := w.do(http.MethodPost, machine.EnrolPath, "", jsonCT, body)
		if a.status != http.StatusBadRequest || a.errorCode() != machine.CodeInvalidRequest {
			t.Errorf("%s: %d %s", name, a.status, a.body)
		}
		if bytes.Contains(a.body, []byte(tok)) {
			t.Errorf("%s: the refusal quotes the token", name)
		}
	}
	if after, _ := os.ReadFile(state); !bytes.Equal(before, after) {
		t.Fatal("a malformed enrolment wrote the state")
	}
	if _, err := w.enrol.Check(tok); err != nil {
		t.Fatalf("a malformed enrolment used the token: %v", err)
	}
}

// TestDownloadPathAndRangeTricks: paths that are not exactly
// <source>/<declared name> are 404; Range headers give at most the
// artifact's bytes, a valid prefix or suffix of them, or 416.
func TestDownloadPathAndRangeTricks(t *testing.T) {
	w := newWorld(t)
	tok := w.token("default")
	// A file beside the release that no manifest declares.
	if err := os.WriteFile(filepath.Join(w.store.Dir(), "rel-7", "secret.txt"), []byte("not served"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{
		"rel-7/secret.txt", "rel-7/../rel-x/manifest.json", "rel-7/./manifest.json", "./rel-7/manifest.json",
		"rel-7//manifest.json", "rel-7/manifest.json/", "REL-7/manifest.json", "rel-7/.lock", "../releases/rel-7/manifest.json",
		".lock/x", ".tmp-0/manifest.json", "rel-7/image.tar%00", "rel-7/image.tar/..", "rel-7/%2e%2e/rel-x/image.tar",
		"rel-7/image.tar.partial", "rel-7/manifest.json%3F/../../enrolment.json",
	} {
		a := w.do(http.MethodGet, machine.ReleasesPrefix+p, tok, nil, "")
		if a.status != http.StatusNotFound || bytes.Contains(a.body, []byte("not served")) {
			t.Errorf("%s: %d %q", p, a.status, a.body)
		}
	}
	img := w.images["rel-7"] // 1000 bytes
	url := machine.ArtifactURL("rel-7", "image.tar")
	for rng, want := range map[string]int{
		"bytes=-1": 206, "bytes=999-": 206, "bytes=1000-": 416, "bytes=0-18446744073709551616": 416,
		"bytes=5-1": 416, "bytes=-0": 206, "bytes=a-b": 416, "bytes=0-0" + strings.Repeat(",0-0", 2000): 200,
		"bytes=0-999999": 206, "items=0-1": 416, "bytes= 0-1": 206,
	} {
		a := w.do(http.MethodGet, url, tok, map[string]string{"Range": rng}, "")
		if a.status != want {
			t.Errorf("Range %.40q: %d, want %d", rng, a.status, want)
			continue
		}
		switch a.status {
		case http.StatusOK:
			if !bytes.Equal(a.body, img) {
				t.Errorf("Range %.40q: 200 with %d bytes", rng, len(a.body))
			}
		case http.StatusPartialContent:
			if len(a.body) > len(img) || !bytes.Contains(img, a.body) {
				t.Errorf("Range %.40q: 206 with %d bytes that are not a piece of the artifact", rng, len(a.body))
			}
		}
	}
	// If-Range with another entity tag: the whole file, never a piece of
	// it appended to bytes of another version.
	a := w.do(http.MethodGet, url, tok, map[string]string{"Range": "bytes=600-", "If-Range": `"sha256:` + strings.Repeat("0", 64) + `"`}, "")
	if a.status != http.StatusOK || !bytes.Equal(a.body, img) {
		t.Fatalf("If-Range with another ETag: %d, %d bytes", a.status, len(a.body))
	}
}

// TestRepublishRacingDownloads: while an operator re-publishes a release
// whose seccomp profile went missing from the store, nodes keep
// downloading it. Every answer is either the exact declared bytes or 404
// (the profile before it was added), never a partial or foreign byte.
func TestRepublishRacingDownloads(t *testing.T) {
	w := newWorld(t)
	tok := w.token("default")
	src := filepath.Join(t.TempDir(), "rel-s")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	img := bytes.Repeat([]byte("s"), 1<<20)
	sec := []byte(`{"defaultAction":"SCMP_ACT_ALLOW"}`)
	for name, b := range map[string][]byte{"image.tar": img, "seccomp.json": sec,
		"provider.json": []byte(`{"provider":"docker","image_ref":"sandgate-test/busybox:1"}`)} {
		if err := os.WriteFile(filepath.Join(src, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := release.Build("rel-s", src, map[release.Kind]string{release.KindImage: "image.tar",
		release.KindProviderSpec: "provider.json", release.KindSeccomp: "seccomp.json"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, release.ManifestName), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := w.store.Publish(src); err != nil {
		t.Fatal(err)
	}
	if _, err := w.pools.Set("default", 9, nil, &pool.Binding{Generation: 9, SpecificationDigest: release.Digest(raw), Source: "rel-s"}); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 20; round++ {
		if err := os.Remove(filepath.Join(w.store.Dir(), "rel-s", "seccomp.json")); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					for name, want := range map[string][]byte{"image.tar": img, "seccomp.json": sec} {
						a := w.do(http.MethodGet, machine.ArtifactURL("rel-s", name), tok, nil, "")
						ok := a.status == 200 && bytes.Equal(a.body, want) || a.status == 404 && name == "seccomp.json"
						if !ok {
							t.Errorf("round %d, %s: %d with %d bytes", round, name, a.status, len(a.body))
						}
					}
				}
			}()
		}
		res, err := w.store.Publish(src)
		close(stop)
		wg.Wait()
		if err != nil || len(res.Added) != 1 {
			t.Fatalf("round %d: re-publish %+v %v", round, res, err)
		}
	}
}
