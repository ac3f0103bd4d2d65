package dataplane

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/integration/execdstub"
)

// gzipOf compresses n bytes of what fill writes.
func gzipOf(t *testing.T, n int, fill func(io.Writer, int)) []byte {
	t.Helper()
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	fill(zw, n)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return gz.Bytes()
}

func zeros(w io.Writer, n int) {
	chunk := make([]byte, 1<<20)
	for ; n > 0; n -= len(chunk) {
		_, _ = w.Write(chunk[:min(n, len(chunk))])
	}
}

// text writes hex of random bytes: it compresses about 2:1.
func text(w io.Writer, n int) {
	b := make([]byte, 32<<10)
	for ; n > 0; n -= 2 * len(b) {
		_, _ = rand.Read(b)
		_, _ = io.WriteString(w, hex.EncodeToString(b)[:min(n, 2*len(b))])
	}
}

// gzipWrite sends an octet-stream gzip write of body to path.
func (e *testEnv) gzipWrite(path string, body []byte) (*http.Response, []byte) {
	e.t.Helper()
	req := e.request(http.MethodPost, "/files?path="+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Content-Encoding", "gzip")
	resp, b := e.do(req)
	e.waitOutcome()
	return resp, b
}

// TestGzipWriteBounds: a gzip write that decompresses past
// MaxDecompressedBytes, or past the ratio beyond the 16 MiB floor, is
// refused with WRITE_TOO_LARGE (507, envd's REST error body) and the file
// it targets keeps its content; writes within the bounds (a small very
// compressible file under the floor, ordinary text) are written whole.
func TestGzipWriteBounds(t *testing.T) {
	e := newTestEnv(t, func(c *Config, _ *execdstub.Config) { c.MaxDecompressedBytes = 20 << 20 })
	e.writeFile("home/user/keep.txt", "old")
	for name, tc := range map[string]struct {
		body []byte
		want string
	}{
		"over the size bound (text)": {gzipOf(t, 21<<20, text), "more than 20971520 bytes (max_decompressed_size)"},
		"over the ratio (zeros)":     {gzipOf(t, 32<<20, zeros), "more than 100 times its compressed size (max_decompression_ratio)"},
	} {
		t.Run(name, func(t *testing.T) {
			resp, b := e.gzipWrite("keep.txt", tc.body)
			var body struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			_ = json.Unmarshal(b, &body)
			if resp.StatusCode != http.StatusInsufficientStorage || resp.Header.Get(ErrorHeader) != string(CodeWriteTooLarge) ||
				body.Code != 507 || !strings.HasPrefix(body.Message, "WRITE_TOO_LARGE: ") || !strings.Contains(body.Message, tc.want) {
				t.Fatalf("%d %s %q", resp.StatusCode, resp.Header.Get(ErrorHeader), b)
			}
			if got, _ := os.ReadFile(e.hostPath("home/user/keep.txt")); string(got) != "old" {
				t.Fatalf("keep.txt changed by a refused write: %d bytes", len(got))
			}
		})
	}
	for name, n := range map[string]int{"zeros under the floor": 15 << 20, "text under the size bound": 19 << 20} {
		t.Run(name, func(t *testing.T) {
			fill := text
			if strings.HasPrefix(name, "zeros") {
				fill = zeros
			}
			resp, b := e.gzipWrite("ok.bin", gzipOf(t, n, fill))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%d %q", resp.StatusCode, b)
			}
			if fi, err := os.Stat(e.hostPath("home/user/ok.bin")); err != nil || fi.Size() != int64(n) {
				t.Fatalf("written: %v, %v", fi, err)
			}
		})
	}
}

// TestGunzipBoundedStopsAtTheBound: the reader never hands on a byte past
// the size bound, and reports the ratio only past the floor.
func TestGunzipBoundedStopsAtTheBound(t *testing.T) {
	body := gzipOf(t, 5<<20, zeros)
	r, err := gunzipBounded(bytes.NewReader(body), 3<<20, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, r)
	var tl *tooLarge
	if !errors.As(err, &tl) || n != 3<<20 {
		t.Fatalf("read %d bytes, %v; want exactly the 3 MiB bound and *tooLarge", n, err)
	}
	r, _ = gunzipBounded(bytes.NewReader(gzipOf(t, DecompressionRatioFloor, zeros)), 1<<30, 2)
	if n, err := io.Copy(io.Discard, r); err != nil || n != DecompressionRatioFloor {
		t.Fatalf("at the floor: %d, %v", n, err)
	}
	if _, err := gunzipBounded(strings.NewReader("not gzip"), 1, 1); err == nil {
		t.Fatal("not gzip accepted")
	}
}
