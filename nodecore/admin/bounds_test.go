package admin

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// countingBody is a body of n spaces after prefix that counts the bytes
// read.
type countingBody struct {
	prefix  *strings.Reader
	n, read int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	if c.prefix.Len() > 0 {
		k, _ := c.prefix.Read(p)
		c.read += int64(k)
		return k, nil
	}
	if c.read >= c.n {
		return 0, io.EOF
	}
	k := min(int64(len(p)), c.n-c.read)
	for i := range p[:k] {
		p[i] = ' '
	}
	c.read += k
	return int(k), nil
}

// TestOversizedBodiesAreReadOnlyToTheLimit: the operator's routes that
// take a body answer 413 after at most MaxBody+1 bytes of a 64 MiB one,
// and change nothing.
func TestOversizedBodiesAreReadOnlyToTheLimit(t *testing.T) {
	srv, st, statePath := newServer(t)
	before, _ := os.ReadFile(statePath)
	h := srv.Config.Handler
	for path, start := range map[string]string{
		"/sandgate/pools/default/deployment": `{"generation": 8, "serving_generation": null, "release": "rel-8"`,
		"/sandgate/enrolment-tokens":         `{"pool": "default"`,
	} {
		method := http.MethodPut
		if path == TokensPath {
			method = http.MethodPost
		}
		body := &countingBody{prefix: strings.NewReader(start), n: 64 << 20}
		req := httptest.NewRequest(method, path, body)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusRequestEntityTooLarge {
			t.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
		}
		if body.read > MaxBody+1 {
			t.Fatalf("%s: %d bytes read before the refusal", path, body.read)
		}
	}
	if after, _ := os.ReadFile(statePath); !bytes.Equal(before, after) {
		t.Fatal("the pool state changed")
	}
	if d, _ := st.reg.Deployment("default"); d.Generation != 7 {
		t.Fatalf("deployment %+v", d)
	}
	if recs := st.enrol.Records(); len(recs) != 0 {
		t.Fatalf("%+v", recs)
	}
}
